"""Strom on Apache Spark: the `fluss` data source (batch and streaming reads and writes).

    import strom.spark
    spark = strom.spark.session()            # local SparkSession with format "fluss" registered
    df = (spark.read.format("fluss")
          .option("bootstrap.servers", "127.0.0.1:9123").option("table", "shop.orders").load())

`register(spark)` adds the data source to a session you built yourself. Importing this package
does not import pyspark (the functions import it when called).
"""

# The functions shadow the submodule `strom.spark.session` on purpose: `strom.spark.session()`.
from strom.spark.session import register, session

__all__ = ["register", "session"]

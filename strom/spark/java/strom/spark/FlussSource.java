package strom.spark;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;

/**
 * Spark's JVM entry for the short name "fluss": the Python data source Strom registers under that
 * name, with two fixes for SQL (see docs/spark.md).
 *
 * Spark's own wrapper of a Python data source drops the properties handed to getTable, so a
 * `CREATE TABLE ... USING fluss OPTIONS (...)` table never passes its options to Python; and it
 * keeps the Python source (and its read plan) for the life of the table object, so a temporary view
 * answers every query with the offsets it read when it was created. Tables made here carry their
 * properties into every scan and write, and plan each scan afresh.
 *
 * DataFrames (spark.read/readStream/write/writeStream, spark.table) keep Spark's behaviour: one
 * Python source per DataFrame, so a loaded DataFrame reads the cut taken when it was loaded, as
 * documented.
 */
public class FlussSource extends PythonDataSourceV2 implements DataSourceRegister {
  public static final String NAME = "fluss";
  // Spark refuses a Python data source named like a JVM one, so with this class on the class path
  // Strom registers its Python source under this name (strom.spark.session.register).
  public static final String PYTHON_NAME = "strom_fluss";

  @Override
  public String shortName() {
    return NAME;
  }

  // Spark names the instance after what the user wrote ("fluss"); the Python side is found by
  // PYTHON_NAME.
  @Override
  public void setShortName(String name) {
    super.setShortName(PYTHON_NAME);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    if (calledByDataFrameApi()) {
      // Also spark.table("t") of a USING fluss table: its properties are needed there too.
      return FlussTable.pinned(this, PYTHON_NAME, schema, properties);
    }
    return new FlussTable(PYTHON_NAME, schema, properties);
  }

  /** A fresh source for one scan or write: Spark caches the Python planning in the instance. */
  static FlussSource fresh(String shortName) {
    FlussSource source = new FlussSource();
    source.setShortName(shortName);
    return source;
  }

  // Spark hands a TableProvider no sign of who asks for a table; the DataFrame reader and writer
  // are on the call stack when a DataFrame is loaded or saved, and never for SQL statements.
  private static final String[] DATAFRAME_API = {
    ".DataFrameReader", ".DataStreamReader", ".DataFrameWriter", ".DataStreamWriter",
  };

  private static boolean calledByDataFrameApi() {
    for (StackTraceElement frame : Thread.currentThread().getStackTrace()) {
      String cls = frame.getClassName();
      if (!cls.startsWith("org.apache.spark.sql.")) {
        continue;
      }
      for (String suffix : DATAFRAME_API) {
        if (cls.endsWith(suffix)) {
          return true;
        }
      }
    }
    return false;
  }
}

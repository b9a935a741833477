package strom.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * SHOW PARTITIONS and ALTER TABLE ADD/DROP PARTITION of a catalog table: Spark's partition
 * identifiers (typed rows) to and from Fluss's partition specs (column name to string value),
 * with the work done by the catalog's Python side.
 */
final class FlussPartitions {
  private final FlussCatalog catalog;
  private final Identifier ident;
  private final StructType partitionSchema;

  FlussPartitions(FlussCatalog catalog, Identifier ident, StructType partitionSchema) {
    this.catalog = catalog;
    this.ident = ident;
    this.partitionSchema = partitionSchema;
  }

  StructType schema() {
    return partitionSchema;
  }

  private Map<String, String> spec(InternalRow row, StructType schema) {
    Map<String, String> spec = new LinkedHashMap<>();
    for (int i = 0; i < schema.fields().length; i++) {
      StructField field = schema.fields()[i];
      spec.put(field.name(), String.valueOf(row.get(i, field.dataType())));
    }
    return spec;
  }

  private static Object typed(String value, DataType type) {
    if (type instanceof StringType) {
      return UTF8String.fromString(value);
    }
    if (type instanceof IntegerType) {
      return Integer.parseInt(value);
    }
    if (type instanceof LongType) {
      return Long.parseLong(value);
    }
    if (type instanceof BooleanType) {
      return Boolean.parseBoolean(value);
    }
    throw new UnsupportedOperationException(
        "Partition columns of type " + type.simpleString() + " are not supported in SQL yet.");
  }

  void create(InternalRow row) {
    catalog.call("create_partition", "database", ident.namespace()[0], "table", ident.name(),
        "spec", spec(row, partitionSchema));
  }

  boolean drop(InternalRow row) {
    return catalog.call("drop_partition", "database", ident.namespace()[0], "table", ident.name(),
        "spec", spec(row, partitionSchema)).asBoolean();
  }

  InternalRow[] list(String[] names, InternalRow row) {
    Map<String, String> wanted = new LinkedHashMap<>();
    for (int i = 0; i < names.length; i++) {
      DataType type = partitionSchema.apply(names[i]).dataType();
      wanted.put(names[i], String.valueOf(row.get(i, type)));
    }
    JsonNode specs = catalog.call("list_partitions", "database", ident.namespace()[0],
        "table", ident.name(), "spec", wanted);
    List<InternalRow> out = new ArrayList<>();
    for (JsonNode spec : specs) {
      Object[] values = new Object[partitionSchema.fields().length];
      for (int i = 0; i < values.length; i++) {
        StructField field = partitionSchema.fields()[i];
        values[i] = typed(spec.get(field.name()).asText(), field.dataType());
      }
      out.add(new GenericInternalRow(values));
    }
    return out.toArray(new InternalRow[0]);
  }
}

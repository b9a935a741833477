package strom.spark;

import java.util.HashMap;
import java.util.Map;
import java.util.Optional;

import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A Fluss table as SQL sees it: its properties (bootstrap.servers, table, client.*) reach the
 * Python data source with every scan and write, and every scan plans anew, so each query reads
 * up to the offsets that are latest when it starts.
 */
public class FlussTable extends PythonTable {
  private final String shortName;
  private final StructType schema;
  private final Map<String, String> properties;

  public FlussTable(String shortName, StructType schema, Map<String, String> properties) {
    super(FlussSource.fresh(shortName), shortName, schema);
    this.shortName = shortName;
    this.schema = schema;
    this.properties = new HashMap<>(properties);
  }

  @Override
  public Map<String, String> properties() {
    return properties;
  }

  /** The table's properties, overridden by the statement's own options. */
  private CaseInsensitiveStringMap merged(Map<String, String> options) {
    Map<String, String> all = new HashMap<>(properties);
    all.putAll(options);
    return new CaseInsensitiveStringMap(all);
  }

  private PythonTable planned() {
    return new PythonTable(FlussSource.fresh(shortName), shortName, schema);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return planned().newScanBuilder(merged(options.asCaseSensitiveMap()));
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    CaseInsensitiveStringMap options = merged(info.options().asCaseSensitiveMap());
    LogicalWriteInfo withOptions = new LogicalWriteInfo() {
      @Override
      public CaseInsensitiveStringMap options() {
        return options;
      }

      @Override
      public String queryId() {
        return info.queryId();
      }

      @Override
      public StructType schema() {
        return info.schema();
      }

      @Override
      public Optional<StructType> rowIdSchema() {
        return info.rowIdSchema();
      }

      @Override
      public Optional<StructType> metadataSchema() {
        return info.metadataSchema();
      }
    };
    return planned().newWriteBuilder(withOptions);
  }
}

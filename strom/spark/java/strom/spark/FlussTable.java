package strom.spark;

import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsPartitionManagement;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A Fluss table as SQL sees it: its properties (bootstrap.servers, table, client.*) reach the
 * Python data source with every scan and write, and every scan plans anew, so each query reads
 * up to the offsets that are latest when it starts.
 */
public class FlussTable extends PythonTable implements SupportsPartitionManagement {
  private final String shortName;
  private final StructType schema;
  // What the data source gets with every scan and write.
  private final Map<String, String> properties;
  private final Transform[] partitioning;
  // What DESCRIBE shows (a catalog table's Fluss properties; never the connection's options).
  private final Map<String, String> shown;

  // DataFrames: the one source the DataFrame was loaded with, which keeps its cut (null: SQL, a
  // fresh source per scan).
  private final PythonDataSourceV2 pinned;

  public FlussTable(String shortName, StructType schema, Map<String, String> properties) {
    this(shortName, schema, properties, new Transform[0], Map.of(), null);
  }

  /** A table read through one source, as a loaded DataFrame is (see FlussSource.getTable). */
  static FlussTable pinned(
      PythonDataSourceV2 source, String shortName, StructType schema, Map<String, String> properties) {
    return new FlussTable(shortName, schema, properties, new Transform[0], Map.of(), source);
  }

  public FlussTable(
      String shortName,
      StructType schema,
      Map<String, String> properties,
      Transform[] partitioning,
      Map<String, String> shown) {
    this(shortName, schema, properties, partitioning, shown, null);
  }

  public FlussTable(
      String shortName,
      StructType schema,
      Map<String, String> properties,
      Transform[] partitioning,
      Map<String, String> shown,
      PythonDataSourceV2 pinned) {
    super(pinned != null ? pinned : FlussSource.fresh(shortName), shortName, schema);
    this.pinned = pinned;
    this.shortName = shortName;
    this.schema = schema;
    this.properties = new HashMap<>(properties);
    this.partitioning = partitioning;
    this.shown = shown;
  }

  @Override
  public Map<String, String> properties() {
    return shown;
  }

  @Override
  public Transform[] partitioning() {
    return partitioning;
  }

  // Catalog tables manage their partitions through the catalog; USING tables have none to manage.
  private FlussPartitions partitions;

  void managePartitions(FlussPartitions partitions) {
    this.partitions = partitions;
  }

  private FlussPartitions partitions() {
    if (partitions == null) {
      throw new UnsupportedOperationException(
          "Partitions of a USING fluss table are managed in Fluss (strom, the client), or use a "
              + "Fluss catalog (strom.spark.FlussCatalog).");
    }
    return partitions;
  }

  @Override
  public StructType partitionSchema() {
    return partitions == null ? new StructType() : partitions.schema();
  }

  @Override
  public void createPartition(InternalRow ident, Map<String, String> properties) {
    if (!properties.isEmpty()) {
      throw new UnsupportedOperationException("Fluss partitions have no properties: " + properties);
    }
    partitions().create(ident);
  }

  @Override
  public boolean dropPartition(InternalRow ident) {
    return partitions().drop(ident);
  }

  @Override
  public void replacePartitionMetadata(InternalRow ident, Map<String, String> properties) {
    throw new UnsupportedOperationException("Fluss partitions have no properties.");
  }

  @Override
  public Map<String, String> loadPartitionMetadata(InternalRow ident) {
    return Map.of();
  }

  @Override
  public InternalRow[] listPartitionIdentifiers(String[] names, InternalRow ident) {
    return partitions().list(names, ident);
  }

  /** The table's properties, overridden by the statement's own options. */
  private CaseInsensitiveStringMap merged(Map<String, String> options) {
    Map<String, String> all = new HashMap<>();
    if (pinned == null) {
      // Pushed filters are safe by default here: every scan has a Python source of its own, so no
      // query can inherit another's pruned plan (the reason DataFrames need the option).
      all.put(FILTER_PUSHDOWN, "true");
    }
    // Spark's option names are case-insensitive: one spelling per option, the statement's last.
    properties.forEach((k, v) -> all.put(k.toLowerCase(Locale.ROOT), v));
    options.forEach((k, v) -> all.put(k.toLowerCase(Locale.ROOT), v));
    return new CaseInsensitiveStringMap(all);
  }

  private static final String FILTER_PUSHDOWN = "scan.filter-pushdown";
  private static final String QUERY_ID = "__spark.query-id";

  private PythonTable planned() {
    return new PythonTable(pinned != null ? pinned : FlussSource.fresh(shortName), shortName, schema);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    CaseInsensitiveStringMap all = merged(options.asCaseSensitiveMap());
    if (pinned != null) {
      return planned().newScanBuilder(all);
    }
    // Virtual tables ($changelog, $binlog) build their rows from every column: no pruning.
    boolean prunable = !all.getOrDefault("table", "").contains("$");
    return new FlussScanBuilder(shortName, schema, all, prunable);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    Map<String, String> given = new HashMap<>(info.options().asCaseSensitiveMap());
    // A streaming query's id is kept in its checkpoint and survives restarts; exactly-once appends
    // name their producer offsets after it (strom.spark.exactly_once). Python sources never see it.
    given.put(QUERY_ID, info.queryId());
    CaseInsensitiveStringMap options = merged(given);
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

package strom.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark's scan builder for Python sources, plus column pruning: Spark offers Python sources no
 * projection, but a Python source given a narrower schema reads only those columns from Fluss
 * (the server-side projection). Filters are pushed to the Python reader as before; when columns
 * were pruned, the same filters are pushed again to a reader planned with the narrower schema
 * (the Python reader decides on filters by the table's schema, so it decides the same way).
 *
 * <p>{@code count(*)} without filters or grouping is answered from GetTableStats (asked through the
 * driver's Python side, strom.spark.catalog) as a local scan of one row: no Fluss data is read.
 * Python declines (and Spark scans) when the stats are not the scan's count.
 */
final class FlussScanBuilder
    implements ScanBuilder,
        SupportsPushDownFilters,
        SupportsPushDownRequiredColumns,
        SupportsPushDownAggregates {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final String shortName;
  private final StructType schema;
  private final CaseInsensitiveStringMap options;
  private final boolean prunable;
  private PythonScanBuilder filtered;
  private Filter[] all = new Filter[0];
  private Filter[] pushed = new Filter[0];
  private StructType required;
  // count(*) answered from table stats: the count, and how many count(*) the query asks.
  private Long rowCount;
  private int counts;

  FlussScanBuilder(
      String shortName, StructType schema, CaseInsensitiveStringMap options, boolean prunable) {
    this.shortName = shortName;
    this.schema = schema;
    this.options = options;
    this.prunable = prunable;
    this.required = schema;
  }

  private PythonScanBuilder builder(StructType readSchema) {
    return new PythonScanBuilder(FlussSource.fresh(shortName), shortName, readSchema, options);
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    all = filters;
    filtered = builder(schema);
    Filter[] back = filtered.pushFilters(filters);
    pushed = filtered.pushedFilters();
    return back;
  }

  @Override
  public Filter[] pushedFilters() {
    return pushed;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    if (!prunable) {
      return;
    }
    // count(*) needs no column, but a batch without columns has no rows: keep the first one.
    required = requiredSchema.fields().length > 0
        ? requiredSchema
        : new StructType(new StructField[] {schema.fields()[0]});
  }

  private static boolean countsOnly(Aggregation aggregation) {
    if (aggregation.groupByExpressions().length > 0) {
      return false;
    }
    for (AggregateFunc f : aggregation.aggregateExpressions()) {
      if (!(f instanceof CountStar)) {
        return false;
      }
    }
    return aggregation.aggregateExpressions().length > 0;
  }

  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    return countsOnly(aggregation);
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    FlussCatalogBackend python = FlussCatalog.backend();
    // Virtual tables count changes, not rows; filtered counts need the rows.
    if (!prunable || all.length > 0 || !countsOnly(aggregation) || python == null) {
      return false;
    }
    JsonNode answer;
    try {
      answer = JSON.readTree(
          python.call(JSON.writeValueAsString(options.asCaseSensitiveMap()), "row_count", "{}"));
    } catch (Exception e) {
      throw new IllegalStateException("count(*) from table stats failed: " + e, e);
    }
    if (answer.has("error")) {
      throw new IllegalStateException(
          "count(*) from table stats: " + answer.get("message").asText());
    }
    JsonNode count = answer.get("ok");
    if (count == null || count.isNull()) {
      return false;
    }
    rowCount = count.asLong();
    counts = aggregation.aggregateExpressions().length;
    return true;
  }

  @Override
  public Scan build() {
    if (rowCount != null) {
      StructField[] fields = new StructField[counts];
      Object[] values = new Object[counts];
      for (int i = 0; i < counts; i++) {
        fields[i] = new StructField("count_" + i, DataTypes.LongType, false, Metadata.empty());
        values[i] = rowCount;
      }
      StructType countSchema = new StructType(fields);
      InternalRow row = new GenericInternalRow(values);
      return new LocalScan() {
        @Override
        public InternalRow[] rows() {
          return new InternalRow[] {row};
        }

        @Override
        public StructType readSchema() {
          return countSchema;
        }

        @Override
        public String description() {
          return "FlussTableStats[count=" + rowCount + "]";
        }
      };
    }
    boolean pruned = required.fields().length < schema.fields().length;
    if (!pruned) {
      return (filtered != null ? filtered : builder(schema)).build();
    }
    // Spark checks pushed filters against the reader's schema: keep the columns they name.
    Set<String> keep = new HashSet<>(Arrays.asList(required.fieldNames()));
    for (Filter filter : all) {
      keep.addAll(Arrays.asList(filter.references()));
    }
    List<StructField> fields = new ArrayList<>();
    for (StructField field : schema.fields()) {
      if (keep.contains(field.name())) {
        fields.add(field);
      }
    }
    PythonScanBuilder narrow = builder(new StructType(fields.toArray(new StructField[0])));
    if (all.length > 0) {
      narrow.pushFilters(all);
      if (!Arrays.equals(narrow.pushedFilters(), pushed)) {
        throw new IllegalStateException(
            "The fluss reader pushed other filters for the pruned columns: "
                + Arrays.toString(narrow.pushedFilters()) + " vs " + Arrays.toString(pushed));
      }
    }
    return narrow.build();
  }
}

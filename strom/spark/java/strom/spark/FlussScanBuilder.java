package strom.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.execution.datasources.v2.python.PythonScanBuilder;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark's scan builder for Python sources, plus column pruning: Spark offers Python sources no
 * projection, but a Python source given a narrower schema reads only those columns from Fluss
 * (the server-side projection). Filters are pushed to the Python reader as before; when columns
 * were pruned, the same filters are pushed again to a reader planned with the narrower schema
 * (the Python reader decides on filters by the table's schema, so it decides the same way).
 */
final class FlussScanBuilder
    implements ScanBuilder, SupportsPushDownFilters, SupportsPushDownRequiredColumns {
  private final String shortName;
  private final StructType schema;
  private final CaseInsensitiveStringMap options;
  private final boolean prunable;
  private PythonScanBuilder filtered;
  private Filter[] all = new Filter[0];
  private Filter[] pushed = new Filter[0];
  private StructType required;

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

  @Override
  public Scan build() {
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

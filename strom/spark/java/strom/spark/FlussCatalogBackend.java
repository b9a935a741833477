package strom.spark;

/**
 * The Python side of {@link FlussCatalog}, on the driver (strom.spark.catalog): one call per
 * metadata operation, arguments and result as JSON, so the JVM side stays glue.
 */
public interface FlussCatalogBackend {
  /**
   * Runs `operation` against the cluster the catalog's options name. Returns {"ok": result} or
   * {"error": kind, "message": text}.
   */
  String call(String catalogOptionsJson, String operation, String argumentsJson);
}

package strom.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.catalyst.analysis.NamespaceAlreadyExistsException;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.NonEmptyNamespaceException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.NamespaceChange;
import org.apache.spark.sql.connector.catalog.SupportsNamespaces;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.IdentityTransform;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Fluss databases and tables as a Spark SQL catalog: `spark.sql.catalog.fluss =
 * strom.spark.FlussCatalog` with `spark.sql.catalog.fluss.bootstrap.servers`. Metadata goes to
 * Python on the driver ({@link FlussCatalogBackend}, registered by strom.spark.register); tables
 * read and write through the Python data source ({@link FlussTable}).
 */
public class FlussCatalog implements TableCatalog, SupportsNamespaces {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static volatile FlussCatalogBackend backend;

  private String name;
  private Map<String, String> options;
  private String optionsJson;

  /** Called from Python (strom.spark.session.register) with the driver's backend. */
  public static void setBackend(FlussCatalogBackend python) {
    backend = python;
  }

  /** The driver's Python side, or null before strom.spark.register ran. */
  static FlussCatalogBackend backend() {
    return backend;
  }

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    this.name = name;
    this.options = new HashMap<>(options.asCaseSensitiveMap());
    try {
      this.optionsJson = JSON.writeValueAsString(this.options);
    } catch (Exception e) {
      throw new IllegalArgumentException(e);
    }
  }

  @Override
  public String name() {
    return name;
  }

  // ------------------------------------------------------------------ calls into Python

  JsonNode call(String operation, Object... keyValues) {
    FlussCatalogBackend python = backend;
    if (python == null) {
      throw new IllegalStateException(
          "Catalog '" + name + "' (strom.spark.FlussCatalog) has no Python side: create the session "
              + "with strom.spark.session() or call strom.spark.register(spark).");
    }
    ObjectNode args = JSON.createObjectNode();
    for (int i = 0; i < keyValues.length; i += 2) {
      args.set((String) keyValues[i], JSON.valueToTree(keyValues[i + 1]));
    }
    JsonNode answer;
    try {
      answer = JSON.readTree(python.call(optionsJson, operation, JSON.writeValueAsString(args)));
    } catch (Exception e) {
      throw new IllegalStateException("Catalog '" + name + "': " + operation + " failed: " + e, e);
    }
    if (answer.has("error")) {
      String message = answer.get("message").asText();
      if (answer.has("fluss_error")) {
        // Fluss's own name and code of the error, as its clients show them.
        message = "[Fluss " + answer.get("fluss_error").asText() + " (" + answer.get("fluss_code").asInt()
            + ")] " + message;
      }
      throw new CatalogError(answer.get("error").asText(), message);
    }
    return answer.get("ok");
  }

  /**
   * An error the Python side reported, by kind, its message naming Fluss's error and code; mapped
   * to Spark's exceptions where Spark has one (with this as their cause where Spark takes one).
   */
  static final class CatalogError extends IllegalArgumentException {
    final String kind;

    CatalogError(String kind, String message) {
      super(message);
      this.kind = kind;
    }

    NoSuchTableException noSuchTable(Identifier ident) {
      NoSuchTableException spark = new NoSuchTableException(ident);
      return new NoSuchTableException(
          spark.errorClass().get(), spark.messageParameters(), scala.Option.<Throwable>apply(this));
    }

    TableAlreadyExistsException tableExists(Identifier ident) {
      TableAlreadyExistsException spark = new TableAlreadyExistsException(ident);
      return new TableAlreadyExistsException(
          spark.errorClass().get(), spark.messageParameters(), scala.Option.<Throwable>apply(this));
    }
  }

  private static String database(String[] namespace) throws NoSuchNamespaceException {
    if (namespace.length != 1) {
      throw new NoSuchNamespaceException(namespace);
    }
    return namespace[0];
  }

  private static String[] strings(JsonNode array) {
    String[] out = new String[array.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = array.get(i).asText();
    }
    return out;
  }

  private static Map<String, String> stringMap(JsonNode object) {
    Map<String, String> out = new LinkedHashMap<>();
    Iterator<Map.Entry<String, JsonNode>> fields = object.fields();
    while (fields.hasNext()) {
      Map.Entry<String, JsonNode> field = fields.next();
      out.put(field.getKey(), field.getValue().asText());
    }
    return out;
  }

  // ------------------------------------------------------------------ namespaces

  @Override
  public String[][] listNamespaces() {
    String[] databases = strings(call("list_databases"));
    String[][] out = new String[databases.length][];
    for (int i = 0; i < databases.length; i++) {
      out[i] = new String[] {databases[i]};
    }
    return out;
  }

  @Override
  public String[][] listNamespaces(String[] namespace) throws NoSuchNamespaceException {
    if (namespace.length == 0) {
      return listNamespaces();
    }
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return new String[0][];
  }

  @Override
  public boolean namespaceExists(String[] namespace) {
    return namespace.length == 1 && call("database_exists", "database", namespace[0]).asBoolean();
  }

  @Override
  public Map<String, String> loadNamespaceMetadata(String[] namespace)
      throws NoSuchNamespaceException {
    String db = database(namespace);
    try {
      return stringMap(call("database_info", "database", db));
    } catch (CatalogError e) {
      if (e.kind.equals("NO_SUCH_DATABASE")) {
        throw new NoSuchNamespaceException(namespace);
      }
      throw e;
    }
  }

  @Override
  public void createNamespace(String[] namespace, Map<String, String> metadata)
      throws NamespaceAlreadyExistsException {
    if (namespace.length != 1) {
      throw new IllegalArgumentException("Fluss databases have one-part names, not " + String.join(".", namespace));
    }
    try {
      call("create_database", "database", namespace[0], "properties", metadata);
    } catch (CatalogError e) {
      if (e.kind.equals("DATABASE_EXISTS")) {
        throw new NamespaceAlreadyExistsException(namespace);
      }
      throw e;
    }
  }

  @Override
  public void alterNamespace(String[] namespace, NamespaceChange... changes) {
    throw new UnsupportedOperationException("Fluss databases cannot be altered.");
  }

  @Override
  public boolean dropNamespace(String[] namespace, boolean cascade)
      throws NoSuchNamespaceException, NonEmptyNamespaceException {
    String db = database(namespace);
    try {
      return call("drop_database", "database", db, "cascade", cascade).asBoolean();
    } catch (CatalogError e) {
      if (e.kind.equals("NO_SUCH_DATABASE")) {
        throw new NoSuchNamespaceException(namespace);
      }
      if (e.kind.equals("DATABASE_NOT_EMPTY")) {
        throw new NonEmptyNamespaceException(namespace, e.getMessage(), scala.Option.<Throwable>apply(e));
      }
      throw e;
    }
  }

  // ------------------------------------------------------------------ tables

  @Override
  public Identifier[] listTables(String[] namespace) throws NoSuchNamespaceException {
    String db = database(namespace);
    String[] tables;
    try {
      tables = strings(call("list_tables", "database", db));
    } catch (CatalogError e) {
      if (e.kind.equals("NO_SUCH_DATABASE")) {
        throw new NoSuchNamespaceException(namespace);
      }
      throw e;
    }
    Identifier[] out = new Identifier[tables.length];
    for (int i = 0; i < tables.length; i++) {
      out[i] = Identifier.of(namespace, tables[i]);
    }
    return out;
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    if (ident.namespace().length != 1) {
      throw new NoSuchTableException(ident);
    }
    String db = ident.namespace()[0];
    JsonNode table;
    try {
      table = call("load_table", "database", db, "table", ident.name());
    } catch (CatalogError e) {
      if (e.kind.equals("NO_SUCH_TABLE") || e.kind.equals("NO_SUCH_DATABASE")) {
        throw e.noSuchTable(ident);
      }
      throw e;
    }
    StructType schema = (StructType) DataType.fromJson(table.get("schema").toString());
    List<Transform> partitioning = new ArrayList<>();
    for (String key : strings(table.get("partition_keys"))) {
      partitioning.add(Expressions.identity(key));
    }
    // What the data source needs: the catalog's options (cluster, client.*, read/write defaults)
    // and the table.
    Map<String, String> sourceOptions = new HashMap<>(options);
    sourceOptions.put("table", db + "." + ident.name());
    FlussTable loaded = new FlussTable(
        FlussSource.PYTHON_NAME,
        schema,
        sourceOptions,
        partitioning.toArray(new Transform[0]),
        stringMap(table.get("properties")));
    List<StructField> partitionFields = new ArrayList<>();
    for (String key : strings(table.get("partition_keys"))) {
      partitionFields.add(schema.apply(key));
    }
    loaded.managePartitions(
        new FlussPartitions(this, ident, new StructType(partitionFields.toArray(new StructField[0]))));
    return loaded;
  }

  @Override
  public Table createTable(
      Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties)
      throws TableAlreadyExistsException, NoSuchNamespaceException {
    List<String> partitionKeys = new ArrayList<>();
    for (Transform transform : partitions) {
      if (!(transform instanceof IdentityTransform)) {
        throw new IllegalArgumentException(
            "Fluss tables are partitioned by columns only (PARTITIONED BY (col, ...)), not by "
                + transform.describe() + ".");
      }
      partitionKeys.add(((IdentityTransform) transform).ref().fieldNames()[0]);
    }
    if (ident.namespace().length != 1) {
      throw new NoSuchNamespaceException(ident.namespace());
    }
    try {
      call(
          "create_table",
          "database", ident.namespace()[0],
          "table", ident.name(),
          "schema", JSON.readTree(schema.json()),
          "partition_keys", partitionKeys,
          "properties", properties);
    } catch (CatalogError e) {
      if (e.kind.equals("TABLE_EXISTS")) {
        throw e.tableExists(ident);
      }
      if (e.kind.equals("NO_SUCH_DATABASE")) {
        throw new NoSuchNamespaceException(ident.namespace());
      }
      throw e;
    } catch (Exception e) {
      throw new IllegalArgumentException(e);
    }
    try {
      return loadTable(ident);
    } catch (NoSuchTableException e) {
      throw new IllegalStateException("Table " + ident + " vanished right after it was created", e);
    }
  }

  @Override
  public Table alterTable(Identifier ident, TableChange... changes) throws NoSuchTableException {
    ArrayNode list = JSON.createArrayNode();
    for (TableChange change : changes) {
      ObjectNode item = list.addObject();
      if (change instanceof TableChange.AddColumn add) {
        if (add.fieldNames().length != 1) {
          throw new IllegalArgumentException("Fluss adds top-level columns only: " + String.join(".", add.fieldNames()));
        }
        if (add.position() != null) {
          throw new IllegalArgumentException("Fluss adds columns at the end only (no FIRST/AFTER).");
        }
        item.put("op", "add_column");
        item.put("name", add.fieldNames()[0]);
        item.set("type", readJson(add.dataType().json()));
        item.put("nullable", add.isNullable());
        if (add.comment() != null) {
          item.put("comment", add.comment());
        }
      } else if (change instanceof TableChange.SetProperty set) {
        item.put("op", "set");
        item.put("key", set.property());
        item.put("value", set.value());
      } else if (change instanceof TableChange.RemoveProperty remove) {
        item.put("op", "reset");
        item.put("key", remove.property());
      } else {
        throw new UnsupportedOperationException(
            "Fluss tables take ADD COLUMN(S) and SET/UNSET TBLPROPERTIES only, not " + change + ".");
      }
    }
    try {
      call("alter_table", "database", ident.namespace()[0], "table", ident.name(), "changes", list);
    } catch (CatalogError e) {
      if (e.kind.equals("NO_SUCH_TABLE") || e.kind.equals("NO_SUCH_DATABASE")) {
        throw e.noSuchTable(ident);
      }
      throw e;
    }
    return loadTable(ident);
  }

  private static JsonNode readJson(String text) {
    try {
      return JSON.readTree(text);
    } catch (Exception e) {
      throw new IllegalArgumentException(e);
    }
  }

  @Override
  public boolean dropTable(Identifier ident) {
    if (ident.namespace().length != 1) {
      return false;
    }
    return call("drop_table", "database", ident.namespace()[0], "table", ident.name()).asBoolean();
  }

  @Override
  public void renameTable(Identifier oldIdent, Identifier newIdent) {
    throw new UnsupportedOperationException("Fluss tables cannot be renamed.");
  }
}

"""How a Fluss table looks in Paimon: columns, keys, buckets and table options.

Follows Fluss's Paimon integration (PaimonConversions / PaimonLakeCatalog before FIP-27):

* Fluss ``db.t`` is Paimon table ``t`` in database ``db``.
* Columns keep their names, order, nullability and comments; types map one to one (Paimon has
  every Fluss type, CHAR and BINARY lengths and time precisions included). Three system columns
  follow: ``__bucket`` INT, ``__offset`` BIGINT, ``__timestamp`` TIMESTAMP(3) WITH LOCAL TIME ZONE.
* Tables with a bucket key get ``bucket`` = the Fluss bucket count and ``bucket-key`` = the Fluss
  bucket key. Fluss buckets tables of a Paimon cluster with Paimon's own bucket function, so Fluss
  bucket N is Paimon bucket N. Log tables without a bucket key are bucket-unaware (``bucket=-1``);
  their rows keep the Fluss bucket in ``__bucket``.
* Primary-key tables are Paimon primary-key tables with ``changelog-producer=input``. Strom adds
  one more column, ``__row_kind`` (+I/-U/+U/-D), named by ``rowkind.field``: it is how pypaimon
  takes row kinds, so deletes and updates are merged by key instead of appended.
* Partition keys are Paimon partition keys; ``partition.legacy-name=false`` as in Fluss.
* Properties: ``paimon.x`` becomes option ``x``; ``table.datalake.paimon.*`` is dropped; every
  other Fluss table or custom property becomes ``fluss.<key>``. The options Fluss sets itself
  (``bucket``, ``bucket-key``, ``partition.legacy-name``, and Strom's ``rowkind.field``) cannot be
  set by users.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pypaimon import Schema as PaimonSchema
from pypaimon.schema.data_types import (
    ArrayType,
    AtomicInteger,
    AtomicType,
    MapType,
    RowType,
    reassign_field_id,
)
from pypaimon.schema.data_types import DataField as PaimonField
from pypaimon.schema.data_types import DataType as PaimonType

from strom.common.errors import InvalidConfigError, InvalidTableError
from strom.common.table_descriptor import TableInfo
from strom.common.types import DataType, DataTypeRoot
from strom.lake.system_columns import BUCKET_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN

__all__ = [
    "BUCKET_COLUMN",
    "OFFSET_COLUMN",
    "RESERVED_COLUMNS",
    "ROW_KIND_COLUMN",
    "SYSTEM_COLUMNS",
    "TIMESTAMP_COLUMN",
    "PaimonLayout",
    "layout_mismatch",
    "paimon_layout",
    "paimon_options",
    "to_paimon_type",
]

ROW_KIND_COLUMN = "__row_kind"
SYSTEM_COLUMNS: dict[str, str] = {
    BUCKET_COLUMN: "INT",
    OFFSET_COLUMN: "BIGINT",
    TIMESTAMP_COLUMN: "TIMESTAMP(3) WITH LOCAL TIME ZONE",
}
RESERVED_COLUMNS = frozenset([*SYSTEM_COLUMNS, ROW_KIND_COLUMN])

FLUSS_PROPERTY_PREFIX = "fluss."
PAIMON_PROPERTY_PREFIX = "paimon."
TABLE_DATALAKE_PAIMON_PREFIX = "table.datalake.paimon."
BUCKET_OPTION = "bucket"
BUCKET_KEY_OPTION = "bucket-key"
ROW_KIND_OPTION = "rowkind.field"
LEGACY_NAME_OPTION = "partition.legacy-name"
FILE_FORMAT_OPTION = "file.format"
DELETION_VECTORS_OPTION = "deletion-vectors.enabled"
UNAWARE_BUCKETS = "-1"
# Set by Fluss (and Strom) from the table itself; users must not override them.
_UNSETTABLE = frozenset({BUCKET_OPTION, BUCKET_KEY_OPTION, LEGACY_NAME_OPTION, ROW_KIND_OPTION})
# Options whose value decides where rows land and how they merge: an existing table must agree.
_LAYOUT_OPTIONS = (BUCKET_OPTION, BUCKET_KEY_OPTION, ROW_KIND_OPTION)
# The writer recounts retract rows in the files it wrote (pypaimon records none), which it can
# only do for formats pyarrow reads.
ROW_KIND_FILE_FORMATS = frozenset({"parquet", "orc"})

_R = DataTypeRoot
_SIMPLE: dict[DataTypeRoot, str] = {
    _R.BOOLEAN: "BOOLEAN",
    _R.TINYINT: "TINYINT",
    _R.SMALLINT: "SMALLINT",
    _R.INTEGER: "INT",
    _R.BIGINT: "BIGINT",
    _R.FLOAT: "FLOAT",
    _R.DOUBLE: "DOUBLE",
    _R.STRING: "STRING",
    _R.BYTES: "BYTES",
    _R.DATE: "DATE",
}


def to_paimon_type(data_type: DataType, *, nullable: bool | None = None) -> PaimonType:
    """The Paimon type of a Fluss type, spelled as Java Paimon does.

    ROW fields are numbered from 0 within their row; `paimon_layout` renumbers them schema-wide.
    """
    root = data_type.root
    null = data_type.nullable if nullable is None else nullable
    simple = _SIMPLE.get(root)
    if simple is not None:
        return AtomicType(simple, null)
    if root is _R.CHAR:
        return AtomicType(f"CHAR({data_type.length})", null)
    if root is _R.BINARY:
        return AtomicType(f"BINARY({data_type.length})", null)
    if root is _R.DECIMAL:
        return AtomicType(f"DECIMAL({data_type.precision}, {data_type.scale})", null)
    if root is _R.TIME_WITHOUT_TIME_ZONE:
        return AtomicType(f"TIME({data_type.precision})", null)
    if root is _R.TIMESTAMP_WITHOUT_TIME_ZONE:
        return AtomicType(f"TIMESTAMP({data_type.precision})", null)
    if root is _R.TIMESTAMP_WITH_LOCAL_TIME_ZONE:
        return AtomicType(f"TIMESTAMP({data_type.precision}) WITH LOCAL TIME ZONE", null)
    if root is _R.ARRAY:
        assert data_type.element_type is not None
        return ArrayType(null, to_paimon_type(data_type.element_type))
    if root is _R.MAP:
        assert data_type.key_type is not None and data_type.value_type is not None
        # Paimon map keys are never null, whatever the Fluss key type says.
        key = to_paimon_type(data_type.key_type, nullable=False)
        return MapType(null, key, to_paimon_type(data_type.value_type))
    if root is _R.ROW:
        fields = [
            PaimonField(i, f.name, to_paimon_type(f.type), f.description)
            for i, f in enumerate(data_type.fields)
        ]
        return RowType(null, fields)
    raise InvalidTableError(f"Fluss type {data_type} has no Paimon counterpart.")


@dataclass(frozen=True)
class PaimonLayout:
    """The Paimon table a Fluss table maps to."""

    fields: tuple[PaimonField, ...]
    partition_keys: tuple[str, ...]
    primary_keys: tuple[str, ...]
    options: dict[str, str] = field(default_factory=dict)
    comment: str | None = None

    def to_schema(self) -> PaimonSchema:
        return PaimonSchema(
            fields=list(self.fields),
            partition_keys=list(self.partition_keys),
            primary_keys=list(self.primary_keys),
            options=dict(self.options),
            comment=self.comment,
        )


def _unprefixed(key: str) -> str:
    return key[len(PAIMON_PROPERTY_PREFIX) :] if key.startswith(PAIMON_PROPERTY_PREFIX) else key


def paimon_options(table_info: TableInfo) -> dict[str, str]:
    """Paimon table options: what Fluss sets, then the forwarded Fluss properties."""
    options: dict[str, str] = {LEGACY_NAME_OPTION: "false"}
    if table_info.bucket_keys:
        options[BUCKET_OPTION] = str(table_info.bucket_count)
        options[BUCKET_KEY_OPTION] = ",".join(table_info.bucket_keys)
    else:
        options[BUCKET_OPTION] = UNAWARE_BUCKETS
    if table_info.has_primary_key:
        options["changelog-producer"] = "input"
        options[ROW_KIND_OPTION] = ROW_KIND_COLUMN
    for source in (table_info.descriptor.properties, table_info.custom_properties):
        for key, value in source.items():
            if _unprefixed(key) in _UNSETTABLE:
                raise InvalidConfigError(
                    f"The Paimon option {key} will be set automatically by Fluss and should not be set "
                    "manually."
                )
            if key.startswith(PAIMON_PROPERTY_PREFIX):
                options[key[len(PAIMON_PROPERTY_PREFIX) :]] = value
            elif not key.startswith(TABLE_DATALAKE_PAIMON_PREFIX):
                options[FLUSS_PROPERTY_PREFIX + key] = value
    if table_info.has_primary_key:
        _check_primary_key_options(options)
    return options


def _check_primary_key_options(options: dict[str, str]) -> None:
    file_format = options.get(FILE_FORMAT_OPTION, "parquet").strip().lower()
    if file_format not in ROW_KIND_FILE_FORMATS:
        raise InvalidConfigError(
            f"paimon.{FILE_FORMAT_OPTION}={file_format} is not supported for primary key tables by Strom: "
            f"supported are {sorted(ROW_KIND_FILE_FORMATS)}."
        )
    if options.get(DELETION_VECTORS_OPTION, "false").strip().lower() == "true":
        # Deletion-vector tables only show rows once compaction has moved them out of level 0,
        # and pypaimon cannot compact: the tiered rows would never become visible.
        raise InvalidConfigError(
            f"paimon.{DELETION_VECTORS_OPTION}=true is not supported for primary key tables: it needs "
            "Paimon compaction, which Strom's pypaimon writer cannot run."
        )


def _check_columns(table_info: TableInfo) -> None:
    # __row_kind is only added to (so only reserved in) primary-key tables.
    reserved = RESERVED_COLUMNS if table_info.has_primary_key else frozenset(SYSTEM_COLUMNS)
    for name in table_info.schema.column_names:
        if name in reserved:
            raise InvalidTableError(
                f"Column {name} conflicts with a system column name of paimon table, please rename the "
                "column."
            )


def paimon_layout(table_info: TableInfo) -> PaimonLayout:
    """The expected Paimon table; InvalidTableError / InvalidConfigError if it cannot be made."""
    _check_columns(table_info)
    options = paimon_options(table_info)
    primary_key = set(table_info.primary_key)
    ids = AtomicInteger(-1)
    fields: list[PaimonField] = []
    for column in table_info.schema.columns:
        column_id = ids.increment_and_get()
        # Paimon primary-key columns are NOT NULL (Fluss makes them so too).
        nullable = False if column.name in primary_key else None
        # Nested ids follow their column's id from the same counter, as pypaimon numbers them.
        paimon_type = reassign_field_id(to_paimon_type(column.data_type, nullable=nullable), ids)
        fields.append(PaimonField(column_id, column.name, paimon_type, column.comment))
    system = dict(SYSTEM_COLUMNS)
    if table_info.has_primary_key:
        system[ROW_KIND_COLUMN] = "STRING"
    for name, type_text in system.items():
        fields.append(PaimonField(ids.increment_and_get(), name, AtomicType(type_text, True)))
    return PaimonLayout(
        fields=tuple(fields),
        partition_keys=tuple(table_info.partition_keys),
        primary_keys=tuple(table_info.primary_key),
        options=options,
        comment=table_info.comment,
    )


def _describe(fields: list[PaimonField] | tuple[PaimonField, ...]) -> list[tuple[str, str]]:
    # Names and types (nullability included, ids and comments not).
    return [(f.name, str(f.type)) for f in fields]


def layout_mismatch(
    fields: list[PaimonField],
    partition_keys: list[str],
    primary_keys: list[str],
    options: dict[str, str],
    expected: PaimonLayout,
) -> str | None:
    """Why an existing Paimon table does not match `expected`, or None when it does."""
    if _describe(fields) != _describe(expected.fields):
        return f"the columns differ: existing {_describe(fields)}, expected {_describe(expected.fields)}"
    if list(primary_keys) != list(expected.primary_keys):
        return f"the primary keys differ: existing {primary_keys}, expected {list(expected.primary_keys)}"
    if list(partition_keys) != list(expected.partition_keys):
        wanted = list(expected.partition_keys)
        return f"the partition keys differ: existing {partition_keys}, expected {wanted}"
    for key in _LAYOUT_OPTIONS:
        if options.get(key) != expected.options.get(key):
            return f"option '{key}' is {options.get(key)!r}, expected {expected.options.get(key)!r}"
    return None

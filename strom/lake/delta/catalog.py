"""Delta tables that mirror Fluss log tables, one per table under the warehouse.

Fluss ``db.t`` is the Delta table ``<warehouse>/<db>/<t>``, named ``t``. Its columns are the Fluss
columns (TIME has no Delta counterpart and is refused; timestamps are stored in microseconds, as
Delta does), then ``__bucket`` (integer), ``__offset`` (long) and ``__timestamp`` (timestamp, UTC).
The Fluss partition keys are its partition columns. Primary-key columns are NOT NULL; a round of a
primary-key table is one Delta MERGE by the key (see `strom.lake.delta.committer`).
"""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from strom.common.errors import InvalidTableError, LakeTableAlreadyExistError
from strom.common.file_io import load_file_io
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import TablePath
from strom.lake.interface import LakeCatalog
from strom.lake.system_columns import BUCKET_COLUMN, OFFSET_COLUMN, TIMESTAMP_COLUMN
from strom.lake.warehouse import Warehouse, check_user_columns

__all__ = ["STAGED_DELETE_COLUMN", "DeltaLakeCatalog", "delta_schema"]

# In a primary-key split's staged changes: whether the key's last change removes it (-U, -D).
STAGED_DELETE_COLUMN = "__strom_delete"

SYSTEM_FIELDS = [
    pa.field(BUCKET_COLUMN, pa.int32(), nullable=False),
    pa.field(OFFSET_COLUMN, pa.int64(), nullable=False),
    pa.field(TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC"), nullable=False),
]


def _delta_type(t: pa.DataType) -> pa.DataType:
    """Delta's form of an Arrow type: timestamps in microseconds, fixed-size binary as binary."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_delta_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(_delta_type(t.key_type)), t.item_field.with_type(_delta_type(t.item_type))
        )
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_delta_type(t.field(i).type)) for i in range(t.num_fields)])
    return t


def delta_schema(info: TableInfo) -> pa.Schema:
    """The Delta table's Arrow schema for a Fluss table; InvalidTableError for what Delta cannot hold."""
    check_user_columns(info, "Delta Lake", unsupported=("TIME_WITHOUT_TIME_ZONE",))
    if info.has_primary_key and STAGED_DELETE_COLUMN in info.schema.column_names:
        raise InvalidTableError(f"Column '{STAGED_DELETE_COLUMN}' conflicts with a reserved column name.")
    keys = set(info.primary_key or ())
    user = [
        f.with_type(_delta_type(f.type)).with_nullable(f.nullable and f.name not in keys)
        for f in info.schema.to_arrow_schema()
    ]
    return pa.schema([*user, *SYSTEM_FIELDS])


class DeltaLakeCatalog(LakeCatalog):
    def __init__(self, warehouse: Warehouse) -> None:
        self.warehouse = warehouse

    def uri(self, table_path: TablePath) -> str:
        return self.warehouse.table_uri(table_path.database_name, table_path.table_name)

    def open(self, table_path: TablePath, version: int | None = None) -> DeltaTable:
        return DeltaTable(
            self.uri(table_path), version=version, storage_options=self.warehouse.storage_options or None
        )

    def table_exists(self, table_path: TablePath) -> bool:
        return bool(
            DeltaTable.is_deltatable(
                self.uri(table_path), storage_options=self.warehouse.storage_options or None
            )
        )

    def create_table(self, table_info: TableInfo, *, creating_fluss_table: bool = True) -> None:
        schema = delta_schema(table_info)
        path = table_info.table_path
        if not self.table_exists(path):
            try:
                DeltaTable.create(
                    self.uri(path),
                    schema,
                    partition_by=list(table_info.partition_keys) or None,
                    name=path.table_name,
                    storage_options=self.warehouse.storage_options or None,
                )
                return
            except Exception:  # delta-rs raises plain Exceptions; a concurrent create may have won
                if not self.table_exists(path):
                    raise
        existing = self.open(path)
        have = pa.schema(existing.schema().to_arrow())
        partitions = list(existing.metadata().partition_columns)
        if have != schema or partitions != list(table_info.partition_keys):
            raise LakeTableAlreadyExistError(
                f"The table {path} already exists in the Delta warehouse at {self.uri(path)}, but its schema "
                f"({have}, partitioned by {partitions}) is not the expected one ({schema}, partitioned by "
                f"{list(table_info.partition_keys)}). Please first drop the table or use a new table name."
            )
        if creating_fluss_table and existing.get_add_actions(flatten=True).num_rows > 0:
            raise LakeTableAlreadyExistError(
                f"The table {path} already exists in the Delta warehouse at {self.uri(path)}, and it is not "
                "empty. Please first drop the table or use a new table name."
            )

    def evolve_table(self, table_info: TableInfo) -> list[str]:
        table = self.open(table_info.table_path)
        existing = set(pa.schema(table.schema().to_arrow()).names)
        missing = [c for c in table_info.schema.columns if c.name not in existing]
        if not missing:
            return []
        from deltalake.schema import Field

        # Delta appends new columns after the system columns; readers select them by name.
        fields = [
            Field.from_arrow(pa.field(c.name, _delta_type(c.data_type.to_arrow()), nullable=True))
            for c in missing
        ]
        table.alter.add_columns(fields)
        return [c.name for c in missing]

    def drop_table(self, table_path: TablePath, *, purge: bool = False) -> bool:
        # A path-based Delta table is its directory: dropping it always deletes its files.
        if not self.table_exists(table_path):
            return False

        fs, root = load_file_io(self.uri(table_path), self.warehouse.storage_options).parts()
        fs.rm(root, recursive=True)
        return True

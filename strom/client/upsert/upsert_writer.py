"""Writing to primary-key tables: ``table.new_upsert().create_writer()``.

    writer = table.new_upsert().create_writer()
    writer.upsert({"id": 1, "name": "a"})              # insert or replace the row with this key
    writer.delete({"id": 2})                           # by primary key
    writer.write_arrow(arrow_table)                    # upserts, or a changelog with change_type_column
    await writer.flush()                               # everything above acknowledged

    partial = table.new_upsert().partial_update_by_name(["id", "score"]).create_writer()
    partial.upsert({"id": 1, "score": 9.5})            # other columns keep their values

Every write becomes one KV record (key bytes, CompactedRow value or nothing for a delete), routed to
its partition and bucket exactly as pyfluss routes it (`key_routing`), and queued in the connection's
KV writer (`kv_writer_client`: the append writer's accumulator, sender and idempotent-writer
machinery with KvRecordBatches and PutKv). Calls return a `WriteResult` at once; await it for that
call's acknowledgement, or ``flush()`` for everything.

Rows given one by one are encoded with the precompiled codecs of `strom.record`. Arrow input is
encoded column-wise into KV records (`kv_records`), then split by partition and bucket with one
stable sort, so each bucket keeps the input order. With ``change_type_column``, Arrow input is a
changelog: +I, +U (and +A) rows are upserts, -D rows deletes, -U rows are skipped (the +U that
follows carries the new row), so a Spark changelog stream can be written as it comes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strom.client.upsert.key_routing import KeyRouting
from strom.client.upsert.kv_records import KvRecordEncoder, KvRecords
from strom.client.upsert.kv_write_batch import KvBatchFormat, encode_kv_record
from strom.client.upsert.kv_writer_client import KvWriterClient
from strom.client.writer.arrow_input import conform_batch
from strom.client.writer.queued_writer import QueuedWriter
from strom.client.writer.row_buffer import RowLayout
from strom.client.writer.write_result import WriteResult
from strom.common.errors import InvalidTargetColumnError, NonPrimaryKeyTableError
from strom.common.table_path import PhysicalTablePath
from strom.record.change_type import ChangeType
from strom.record.compacted_row import CompactedRowEncoder

if TYPE_CHECKING:
    from strom.client.table import Table

__all__ = ["TableUpsert", "UpsertWriter", "change_types_of"]

_DELETE = np.int8(ChangeType.DELETE)
_SKIP = np.int8(ChangeType.UPDATE_BEFORE)


class TableUpsert:
    """``table.new_upsert()``: full-row upserts, or partial updates of some columns."""

    def __init__(self, table: Table, target_columns: tuple[int, ...] | None = None) -> None:
        if not table.has_primary_key:
            raise NonPrimaryKeyTableError(
                f"Table '{table.path}' has no primary key; upsert writers are for primary-key tables "
                "(use an append writer)."
            )
        self.table = table
        self.target_columns = target_columns

    def partial_update_by_name(self, columns: Sequence[str]) -> TableUpsert:
        """Write only these columns (they must include the primary key); others keep their values."""
        names = self.table.schema.column_names
        missing = [c for c in columns if c not in names]
        if missing:
            raise InvalidTargetColumnError(
                f"Cannot find target column(s) {missing} in table '{self.table.path}' (columns: {names})."
            )
        return self.partial_update_by_index([names.index(c) for c in columns])

    def partial_update_by_index(self, indexes: Sequence[int]) -> TableUpsert:
        schema = self.table.schema
        count = len(schema.column_names)
        targets = tuple(int(i) for i in indexes)
        bad = [i for i in targets if not 0 <= i < count]
        if bad:
            raise InvalidTargetColumnError(
                f"Invalid target column index(es) {bad} for table '{self.table.path}': "
                f"it has {count} columns."
            )
        if len(set(targets)) != len(targets):
            raise InvalidTargetColumnError(f"Target columns {list(targets)} name a column twice.")
        pk = set(schema.primary_key_indexes)
        if not pk <= set(targets):
            raise InvalidTargetColumnError(
                f"The target columns {[schema.column_names[i] for i in targets]} must contain the primary "
                f"key columns {schema.primary_key_names}."
            )
        for i, column in enumerate(schema.columns):
            if i not in pk and not column.data_type.nullable:
                raise InvalidTargetColumnError(
                    "Partial updates need every column outside the primary key to be nullable, but column "
                    f"'{column.name}' is NOT NULL."
                )
        return TableUpsert(self.table, targets)

    def create_writer(self) -> UpsertWriter:
        return UpsertWriter(self.table, self.target_columns)


def change_types_of(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A change-type column as ChangeType bytes: strings (+I, -U, +U, -D, +A) or their int codes."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        raise ValueError("the change-type column has nulls")
    if pa.types.is_integer(column.type):
        codes = column.to_numpy(zero_copy_only=False).astype(np.int64)
        if len(codes) and (codes.min() < 0 or codes.max() > int(ChangeType.DELETE)):
            raise ValueError(f"change-type codes must be 0..4, got {sorted(set(codes.tolist()))[:5]}")
        return codes.astype(np.int8)
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise TypeError(f"a change-type column holds strings or int codes, not {column.type}")
    encoded = pc.dictionary_encode(column)
    codes = np.array(
        [int(ChangeType.from_short_string(s)) for s in encoded.dictionary.to_pylist()], dtype=np.int8
    )
    return codes[encoded.indices.to_numpy(zero_copy_only=False)]


class UpsertWriter(QueuedWriter):
    def __init__(self, table: Table, target_columns: tuple[int, ...] | None = None) -> None:
        super().__init__()
        info = table.info
        self.table = table
        self.target_columns = target_columns
        schema = info.schema
        self.arrow_schema = schema.to_arrow_schema()
        self._names = tuple(schema.column_names)
        self._width = len(self._names)
        self._routing = KeyRouting(info)
        self._layout = RowLayout(schema, self.arrow_schema)
        self._records = KvRecordEncoder(info, self._routing.key_indexes, self._routing.key_format)
        self._encode_value = CompactedRowEncoder(schema.row_type).encode
        self._format = KvBatchFormat.of(info)
        self._client: KvWriterClient = table.connection.kv_writer_client
        self._batch_size = table.connection.config.writer_batch_size
        self._root = PhysicalTablePath(info.table_path)
        self._paths: dict[str, PhysicalTablePath] = {}
        self._target_names = (
            None if target_columns is None else frozenset(self._names[i] for i in target_columns)
        )

    # ------------------------------------------------------------------ rows

    def upsert(self, row: Mapping[str, Any] | Sequence[Any]) -> WriteResult:
        """Insert the row, or replace the row with its primary key (only the target columns of a
        partial update). A dict by column name, or a tuple/list in column order (in target-column
        order for partial updates)."""
        values = self._layout.values(self._full_row(row))
        key = self._routing.encode_key(values)
        value = self._encode_value(values)
        return self._queue_one(values, key, encode_kv_record(key, value))

    def delete(self, key: Mapping[str, Any] | Sequence[Any]) -> WriteResult:
        """Delete the row with this primary key: a dict with (at least) the primary-key columns, a
        tuple/list of the primary-key values in key order, or a whole row."""
        values = self._key_row(key)
        encoded = self._routing.encode_key(values)
        return self._queue_one(values, encoded, encode_kv_record(encoded, None))

    def _queue_one(self, values: Sequence[Any], key: bytes, record: bytes) -> WriteResult:
        bucket = self._routing.bucket_of(values, key)
        path = self._path(self._routing.partition_of(values))
        batch = self._client.append(path, self._format, bucket, record, 1, self.target_columns)
        return WriteResult((self._track(batch),))

    def _full_row(self, row: Mapping[str, Any] | Sequence[Any]) -> Mapping[str, Any] | Sequence[Any]:
        targets = self.target_columns
        if targets is None:
            return row
        assert self._target_names is not None
        full: list[Any] = [None] * self._width
        if isinstance(row, Mapping):
            unknown = [k for k in row if k not in self._target_names]
            if unknown:
                raise ValueError(
                    f"column(s) {unknown} are not target columns of this partial update "
                    f"{[self._names[i] for i in targets]}"
                )
            for i in targets:
                full[i] = row.get(self._names[i])
        elif isinstance(row, tuple | list):
            if len(row) != len(targets):
                raise ValueError(
                    f"the row has {len(row)} values but the partial update writes {len(targets)} columns "
                    f"{[self._names[i] for i in targets]}"
                )
            for i, v in zip(targets, row, strict=True):
                full[i] = v
        else:
            raise TypeError(f"a row must be a dict, list or tuple, not {type(row).__name__}")
        return full

    def _key_row(self, key: Mapping[str, Any] | Sequence[Any]) -> list[Any]:
        pk = self._routing.primary_key_indexes
        full: list[Any] = [None] * self._width
        if isinstance(key, Mapping):
            unknown = [k for k in key if k not in self._names]
            if unknown:
                raise ValueError(f"unknown column(s) {unknown}; the table has {list(self._names)}")
            missing = [self._names[i] for i in pk if self._names[i] not in key]
            if missing:
                raise ValueError(f"a delete needs the primary-key column(s) {missing}")
            for i in pk:
                full[i] = key[self._names[i]]
        elif isinstance(key, tuple | list):
            if len(key) == len(pk):
                for i, v in zip(pk, key, strict=True):
                    full[i] = v
            elif len(key) == self._width:
                for i in pk:
                    full[i] = key[i]
            else:
                raise ValueError(
                    f"a delete takes the {len(pk)} primary-key values {list(self._routing.primary_key)} "
                    f"(or a whole row of {self._width}), got {len(key)} values"
                )
        else:
            raise TypeError(f"a key must be a dict, list or tuple, not {type(key).__name__}")
        return full

    # ------------------------------------------------------------------ Arrow and pandas

    def write_arrow_batch(
        self, batch: pa.RecordBatch, *, change_type_column: str | None = None
    ) -> WriteResult:
        """Upsert the rows of a RecordBatch (columns matched by name and cast to the table's types).

        With `change_type_column`, that column (strings +I/-U/+U/-D/+A or their int8 codes) says
        what each row is: -D rows delete their key, -U rows are skipped, the others are upserts.
        """
        if not isinstance(batch, pa.RecordBatch):
            raise TypeError(f"write_arrow_batch takes a pyarrow.RecordBatch, not {type(batch).__name__}")
        return WriteResult(self._write_input(batch, change_type_column))

    def write_arrow(self, table: pa.Table, *, change_type_column: str | None = None) -> WriteResult:
        """Upsert the rows of an Arrow Table (see `write_arrow_batch`)."""
        if isinstance(table, pa.RecordBatch):
            return self.write_arrow_batch(table, change_type_column=change_type_column)
        if not isinstance(table, pa.Table):
            raise TypeError(f"write_arrow takes a pyarrow.Table, not {type(table).__name__}")
        futures: list[asyncio.Future[int]] = []
        for batch in table.combine_chunks().to_batches():
            if batch.num_rows:
                futures.extend(self._write_input(batch, change_type_column))
        return WriteResult(futures)

    def _write_input(
        self, batch: pa.RecordBatch, change_type_column: str | None
    ) -> list[asyncio.Future[int]]:
        ops: np.ndarray | None = None
        if change_type_column is not None:
            index = batch.schema.get_field_index(change_type_column)
            if index < 0:
                raise ValueError(f"the input has no change-type column '{change_type_column}'")
            ops = change_types_of(batch.column(index))
            batch = batch.remove_column(index)
        self._check_target_columns(batch.schema.names)
        return self._write(conform_batch(batch, self.arrow_schema), ops)

    def write_pandas(self, df: Any, *, change_type_column: str | None = None) -> WriteResult:
        """Upsert the rows of a pandas DataFrame (its index is not written)."""
        return self.write_arrow(
            pa.Table.from_pandas(df, preserve_index=False), change_type_column=change_type_column
        )

    def delete_arrow(self, keys: pa.Table | pa.RecordBatch) -> WriteResult:
        """Delete the rows whose primary keys are given (other columns of `keys` are ignored)."""
        if isinstance(keys, pa.RecordBatch):
            keys = pa.Table.from_batches([keys])
        if not isinstance(keys, pa.Table):
            raise TypeError(f"delete_arrow takes a pyarrow Table or RecordBatch, not {type(keys).__name__}")
        if keys.num_rows == 0:
            return WriteResult(())
        pk = set(self._routing.primary_key_indexes)
        arrays: list[pa.Array] = []
        for i, field in enumerate(self.arrow_schema):
            if i not in pk:
                arrays.append(pa.nulls(keys.num_rows, field.type))
                continue
            if field.name not in keys.column_names:
                raise ValueError(f"delete_arrow needs the primary-key column '{field.name}'")
            column = keys.column(field.name).combine_chunks()
            if column.type != field.type:
                column = column.cast(field.type)
            if column.null_count:
                raise ValueError(f"primary-key column '{field.name}' has nulls")
            arrays.append(column)
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)
        return WriteResult(self._write(batch, np.full(batch.num_rows, _DELETE, dtype=np.int8)))

    def _check_target_columns(self, names: Sequence[str]) -> None:
        if self._target_names is None:
            return
        extra = [n for n in names if n in self._names and n not in self._target_names]
        if extra:
            raise ValueError(
                f"column(s) {extra} are not target columns of this partial update "
                f"{sorted(self._target_names)}"
            )

    # ------------------------------------------------------------------ routing and encoding

    def _write(self, batch: pa.RecordBatch, ops: np.ndarray | None) -> list[asyncio.Future[int]]:
        """Encode a conformed batch into KV records, split them by partition and bucket (each part
        keeps the input order) and queue them in chunks of at most a batch's size."""
        if ops is not None:
            keep = ops != _SKIP
            if not keep.all():
                batch = batch.filter(pa.array(keep))
                ops = ops[keep]
        if batch.num_rows == 0:
            return []
        records = self._records.records(batch, None if ops is None else ops == _DELETE)
        buckets = self._routing.buckets_of_batch(batch).astype(np.int64)
        partitioner = self._routing.partitioner
        paths = [self._root]
        groups = buckets
        if partitioner is not None:
            codes, names = partitioner.codes_of(batch)
            paths = [self._path(name) for name in names]
            groups = codes * self._routing.num_buckets + buckets
        futures: list[asyncio.Future[int]] = []
        for group, part in _split(records, groups):
            path = paths[group // self._routing.num_buckets] if partitioner is not None else self._root
            bucket = group % self._routing.num_buckets
            for chunk, count in KvRecords(part).chunks(self._batch_size):
                written = self._client.append(path, self._format, bucket, chunk, count, self.target_columns)
                future = self._track(written)
                if not futures or futures[-1] is not future:
                    futures.append(future)
        return futures

    def _path(self, partition_name: str | None) -> PhysicalTablePath:
        if partition_name is None:
            return self._root
        path = self._paths.get(partition_name)
        if path is None:
            path = self._paths[partition_name] = PhysicalTablePath(self.table.path, partition_name)
        return path

    def __repr__(self) -> str:
        partial = "" if self.target_columns is None else f", columns {list(self.target_columns)}"
        return f"UpsertWriter({self.table.path}{partial})"


def _split(records: pa.Array, groups: np.ndarray) -> Iterator[tuple[int, pa.Array]]:
    """The records grouped by `groups` (one int per record), each group in its original order."""
    lo, hi = int(groups.min()), int(groups.max())
    if lo == hi:
        yield lo, records
        return
    # One stable sort and one take, then contiguous runs: O(n log n) whatever the number of groups.
    order = np.argsort(groups, kind="stable")
    ordered = records.take(pa.array(order))
    sorted_groups = groups[order]
    bounds = np.flatnonzero(np.diff(sorted_groups)) + 1
    starts = [0, *bounds.tolist()]
    ends = [*bounds.tolist(), len(sorted_groups)]
    for start, end in zip(starts, ends, strict=True):
        yield int(sorted_groups[start]), ordered.slice(start, end - start)

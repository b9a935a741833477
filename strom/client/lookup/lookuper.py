"""Reading primary-key tables by key: ``table.new_lookup().create_lookuper()`` and prefix lookups with
``table.new_lookup().lookup_by(columns).create_lookuper()``.

    lookuper = table.new_lookup().create_lookuper()
    row = await lookuper.lookup({"id": 1})                      # dict, or None when there is none
    rows = await lookuper.lookup_many([{"id": 1}, (2,)])        # one dict|None per key, in order
    found = await lookuper.lookup_arrow(pa.table({"id": [1, 2]}))

    by_customer = table.new_lookup().lookup_by(["region", "customer"]).create_lookuper()
    orders = await by_customer.lookup({"region": "eu", "customer": 7})   # list of dicts

Keys are encoded and routed exactly as pyfluss does (`strom.client.upsert.key_routing`); a key in a
partition that does not exist finds nothing, unless the table has
`table.datalake.historical-partition.enabled` and retention dropped the partition: then the lake
answers (`historical`). Lookups of every lookuper of the connection, and of
concurrent callers, share batches (`lookup_client`). Values are decoded with the schema they were
written with (`value_decoder`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from strom.client.lookup.historical import historical_values, is_past_auto_partition
from strom.client.lookup.lookup_client import LookupClient
from strom.client.lookup.value_decoder import ValueDecoder
from strom.client.upsert.key_routing import KeyRouting
from strom.common.errors import NonPrimaryKeyTableError, PartitionNotExistError
from strom.common.table_bucket import TableBucket
from strom.record.key_encoder import RowKeyEncoder

if TYPE_CHECKING:
    from strom.client.table import Table

__all__ = ["Lookuper", "PrefixLookuper", "TableLookup", "TablePrefixLookup"]

KeyLike = Mapping[str, Any] | Sequence[Any]
# From this many keys on, direct lookups are hashed column-wise: numpy costs ~70 us per call plus
# ~0.1 us per key, `fluss_bucket` ~1.1 us per short key (measured: even at ~80 keys).
_COLUMNAR_HASH_MIN_KEYS = 96


class TableLookup:
    """``table.new_lookup()``: primary-key lookups, or prefix lookups with `lookup_by`."""

    def __init__(self, table: Table, insert_if_not_exists: bool = False) -> None:
        if not table.has_primary_key:
            raise NonPrimaryKeyTableError(
                f"Table '{table.path}' has no primary key; lookups are for primary-key tables."
            )
        self.table = table
        self.insert_if_not_exists = insert_if_not_exists

    def enable_insert_if_not_exists(self) -> TableLookup:
        """Lookups that insert a missing key (other columns null, an auto-increment column filled) and
        return the new row — Fluss's dictionary-table pair with auto-increment columns."""
        return TableLookup(self.table, insert_if_not_exists=True)

    def lookup_by(self, columns: Sequence[str]) -> TablePrefixLookup:
        """Prefix lookups by the partition keys (if any) followed by the bucket keys."""
        return TablePrefixLookup(self.table, tuple(columns))

    def create_lookuper(self) -> Lookuper:
        return Lookuper(self.table, self.insert_if_not_exists)


class TablePrefixLookup:
    def __init__(self, table: Table, columns: tuple[str, ...]) -> None:
        self.table = table
        self.columns = columns

    def create_lookuper(self) -> PrefixLookuper:
        return PrefixLookuper(self.table, self.columns)


class _KeyedLookup:
    """What both lookupers share: turning user keys into (bucket, key bytes) and decoding values."""

    def __init__(self, table: Table, columns: Sequence[str]) -> None:
        self.table = table
        self.routing = KeyRouting(table.info)
        self.columns = tuple(columns)
        names = self.routing.names
        self._width = len(names)
        self._indexes = tuple(names.index(c) for c in self.columns)
        self._client: LookupClient = table.connection.lookup_client
        self.decoder = ValueDecoder(table)

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.decoder.arrow_schema

    def _row(self, key: KeyLike) -> list[Any]:
        """A full-width row holding the key columns' values (None elsewhere)."""
        row: list[Any] = [None] * self._width
        if isinstance(key, Mapping):
            names = self.routing.names
            unknown = [k for k in key if k not in names]
            if unknown:
                raise ValueError(f"unknown column(s) {unknown}; the table has {list(names)}")
            missing = [c for c in self.columns if c not in key]
            if missing:
                raise ValueError(f"the lookup key needs the column(s) {missing} (key: {list(self.columns)})")
            for name, i in zip(self.columns, self._indexes, strict=True):
                row[i] = key[name]
        elif isinstance(key, tuple | list):
            if len(key) != len(self.columns):
                raise ValueError(
                    f"the key has {len(key)} values; expected {len(self.columns)} {list(self.columns)}"
                )
            for i, v in zip(self._indexes, key, strict=True):
                row[i] = v
        else:
            raise TypeError(f"a key must be a dict, list or tuple, not {type(key).__name__}")
        for name, i in zip(self.columns, self._indexes, strict=True):
            if row[i] is None:
                raise ValueError(f"key column '{name}' is null; keys cannot be null")
        return row

    async def _partition_ids(self, names: Iterable[str | None]) -> dict[str | None, int | None]:
        """Partition name -> id, None for partitions that do not exist (nothing can be found there)."""
        out: dict[str | None, int | None] = {}
        metadata = self.table.connection.metadata
        for name in set(names):
            if name is None:
                out[name] = None
                continue
            try:
                out[name] = await metadata.get_partition_id(self.table.path, name)
            except PartitionNotExistError:
                out[name] = -1
        return out

    def _bucket(self, partition_id: int | None, bucket: int) -> TableBucket:
        return TableBucket(self.table.table_id, partition_id, bucket)

    def _keys_of_arrow(self, keys: pa.Table | pa.RecordBatch) -> list[list[Any]]:
        missing = [c for c in self.columns if c not in keys.schema.names]
        if missing:
            raise ValueError(f"the key table lacks the key column(s) {missing}")
        columns = [keys.column(c).to_pylist() for c in self.columns]
        return [list(values) for values in zip(*columns, strict=True)]


async def _wait_all(futures: Sequence[asyncio.Future[Any] | None]) -> None:
    """Wait for every future; raise the first failure (after all are done, so none goes unobserved)."""
    pending = [f for f in futures if f is not None]
    if not pending:
        return
    results = await asyncio.gather(*pending, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


class Lookuper(_KeyedLookup):
    """Lookups by primary key (a dict by column name or a tuple in primary-key order)."""

    def __init__(self, table: Table, insert_if_not_exists: bool = False) -> None:
        super().__init__(table, table.info.primary_key)
        self.insert_if_not_exists = insert_if_not_exists
        routing = self.routing
        # One key of an unpartitioned table whose bucket is the hash of its key bytes (the common
        # case): the key values go straight to the key encoder and the bucket function, with the
        # bucket objects made once (`_direct`). Anything else takes `_row` and `_values`.
        self._direct = routing.partitioner is None and routing.is_default_bucket_key
        self._key_names = tuple(routing.names[i] for i in routing.key_indexes)
        self._encode_key_values = routing.key_encoder.encoder.encode
        self._table_buckets = [self._bucket(None, b) for b in range(routing.num_buckets)]
        # Keys of concurrent direct lookups waiting to be hashed together (`_route_pending`).
        self._pending: list[tuple[bytes, asyncio.Future[bytes | None]]] = []

    async def lookup(self, key: KeyLike) -> dict[str, Any] | None:
        """The row with this primary key, or None."""
        if self._direct:
            encoded = self._direct_key(key)
            client = self._client
            if not client.try_acquire(1):
                await client.acquire(1)  # the lookup queue is full: wait for room
            loop = client.loop
            future: asyncio.Future[bytes | None] = loop.create_future()
            if not self._pending:
                loop.call_soon(self._route_pending)
            self._pending.append((encoded, future))
            value = await future
        else:
            value = (await self._values([self._row(key)]))[0]
        if value is None:
            return None
        row = self.decoder.own_dict(value)
        if row is not None:
            return row
        if not self.decoder.knows(value):
            await self.decoder.ensure_schemas([value])
        return self.decoder.to_dict(value)

    def _route_pending(self) -> None:
        """Hand the keys of the direct lookups made since the last turn of the event loop to the
        batching client. Their buckets are hashed together: column-wise when there are many (the
        Flink murmur hash costs a few microseconds per key in Python, about a tenth of that with
        numpy over a batch), one by one when there are few."""
        pending, self._pending = self._pending, []
        keys = [key for key, _ in pending]
        futures = [future for _, future in pending]
        routing = self.routing
        unsubmitted = len(keys)  # places in the lookup queue taken by `lookup` for these keys
        try:
            if len(keys) >= _COLUMNAR_HASH_MIN_KEYS:
                buckets = routing.buckets_of_keys(keys, ()).tolist()
            else:
                buckets = [routing.bucket_function(key, routing.num_buckets) for key in keys]
            groups: dict[int, tuple[list[bytes], list[asyncio.Future[bytes | None]]]] = {}
            for b, key, future in zip(buckets, keys, futures, strict=True):
                group = groups.get(b)
                if group is None:
                    group = groups[b] = ([], [])
                group[0].append(key)
                group[1].append(future)
            for b, (bucket_keys, bucket_futures) in groups.items():
                unsubmitted -= len(bucket_keys)
                self._client.lookup_bucket(
                    self.table.path,
                    self._table_buckets[b],
                    bucket_keys,
                    bucket_futures,
                    insert=self.insert_if_not_exists,
                    counted=len(bucket_keys),
                )
        except Exception as e:  # e.g. the connection is closed: the callers get the error
            self._client.release(unsubmitted)
            for future in futures:
                if not future.done():
                    future.set_exception(e)

    def _direct_key(self, key: KeyLike) -> bytes:
        """The key bytes of a dict holding exactly the primary-key columns, without building a
        full-width row; other keys (tuples, extra columns, nulls) take `_row`'s checks."""
        values = None
        if isinstance(key, dict) and len(key) == len(self._key_names):
            try:
                values = [key[name] for name in self._key_names]
            except KeyError:
                values = None
        if values is None or None in values:
            return self.routing.encode_key(self._row(key))
        try:
            return self._encode_key_values(values)
        except (ValueError, TypeError) as e:
            raise ValueError(f"cannot encode the primary key {list(self.routing.primary_key)}: {e}") from e

    async def lookup_many(self, keys: Iterable[KeyLike]) -> list[dict[str, Any] | None]:
        """One row (or None) per key, in the order given; all keys are sent together."""
        values = await self._values([self._row(k) for k in keys])
        found = [v for v in values if v is not None]
        await self.decoder.ensure_schemas(found)
        return [None if v is None else self.decoder.to_dict(v) for v in values]

    async def lookup_arrow(self, keys: pa.Table | pa.RecordBatch, *, keep_missing: bool = False) -> pa.Table:
        """The rows of the keys in `keys` (its primary-key columns; others are ignored), decoded
        column-wise. Keys that find nothing are left out, or give an all-null row with `keep_missing`
        (then row i answers key i)."""
        values = await self._values([self._row(r) for r in self._keys_of_arrow(keys)])
        found = [v for v in values if v is not None]
        await self.decoder.ensure_schemas(found)
        batch = self.decoder.to_arrow(found)
        if keep_missing:
            positions = np.cumsum([v is not None for v in values]) - 1
            indices = pa.array(
                [int(p) if v is not None else None for p, v in zip(positions, values, strict=True)],
                pa.int64(),
            )
            batch = batch.take(indices)
        return pa.Table.from_batches([batch], schema=self.arrow_schema)

    async def _values(self, rows: list[list[Any]]) -> list[bytes | None]:
        routing = self.routing
        keys = [routing.encode_key(r) for r in rows]
        buckets = routing.buckets_of_keys(keys, rows).tolist() if len(rows) > 1 else None
        names = [routing.partition_of(r) for r in rows]
        partition_ids = await self._partition_ids(names)
        wanted: list[tuple[TableBucket, bytes]] = []
        positions: list[int] = []
        table_buckets: dict[tuple[int | None, int], TableBucket] = {}
        # expired partitions answered from the lake: (partition, bucket) -> [(position, key)]
        historical: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
        info = self.table.info
        for i, (row, key, name) in enumerate(zip(rows, keys, names, strict=True)):
            partition_id = partition_ids[name]
            if partition_id == -1:
                if name is not None and not self.insert_if_not_exists and is_past_auto_partition(info, name):
                    bucket = buckets[i] if buckets is not None else routing.bucket_of(row, key)
                    historical.setdefault((name, bucket), []).append((i, key))
                continue  # no such partition: nothing to find (unless the lake has it)
            bucket = buckets[i] if buckets is not None else routing.bucket_of(row, key)
            table_bucket = table_buckets.get((partition_id, bucket))
            if table_bucket is None:
                table_bucket = table_buckets[(partition_id, bucket)] = self._bucket(partition_id, bucket)
            wanted.append((table_bucket, key))
            positions.append(i)
        insert = self.insert_if_not_exists
        futures: list[asyncio.Future[Any]] = []
        if wanted:
            await self._client.acquire(len(wanted))  # waits while the lookup queue is full
            futures = self._client.lookup_many(self.table.path, wanted, insert=insert, counted=len(wanted))
        await _wait_all(futures)
        values: list[bytes | None] = [None] * len(rows)
        for i, future in zip(positions, futures, strict=True):
            values[i] = future.result()
        for (name, bucket), entries in historical.items():
            found = await historical_values(self.table, name, bucket, [key for _, key in entries])
            for (i, _), value in zip(entries, found, strict=True):
                values[i] = value
        return values

    def __repr__(self) -> str:
        return f"Lookuper({self.table.path})"


class PrefixLookuper(_KeyedLookup):
    """Lookups of every row whose primary key starts with the given partition and bucket keys."""

    def __init__(self, table: Table, columns: Sequence[str]) -> None:
        super().__init__(table, columns)
        self._prefix_encoder: RowKeyEncoder = self.routing.prefix_encoder(self.columns)

    async def lookup(self, prefix: KeyLike) -> list[dict[str, Any]]:
        """Every row matching the prefix (partition keys + bucket keys), in key order."""
        values = (await self._value_lists([self._row(prefix)]))[0]
        await self.decoder.ensure_schemas(values)
        return [self.decoder.to_dict(v) for v in values]

    async def lookup_many(self, prefixes: Iterable[KeyLike]) -> list[list[dict[str, Any]]]:
        lists = await self._value_lists([self._row(p) for p in prefixes])
        await self.decoder.ensure_schemas([v for values in lists for v in values])
        return [[self.decoder.to_dict(v) for v in values] for values in lists]

    async def lookup_arrow(self, prefixes: pa.Table | pa.RecordBatch) -> pa.Table:
        """Every row matching any of the prefixes, decoded column-wise (prefix by prefix)."""
        lists = await self._value_lists([self._row(tuple(r)) for r in self._keys_of_arrow(prefixes)])
        values = [v for values in lists for v in values]
        await self.decoder.ensure_schemas(values)
        return pa.Table.from_batches([self.decoder.to_arrow(values)], schema=self.arrow_schema)

    async def _value_lists(self, rows: list[list[Any]]) -> list[list[bytes]]:
        routing = self.routing
        encode = self._prefix_encoder.encode_key
        try:
            prefixes = [encode(r) for r in rows]
        except (ValueError, TypeError) as e:
            raise ValueError(f"cannot encode the prefix {list(self.columns)}: {e}") from e
        names = [routing.partition_of(r) for r in rows]
        partition_ids = await self._partition_ids(names)
        futures: list[asyncio.Future[list[bytes]] | None] = []
        for row, prefix, name in zip(rows, prefixes, names, strict=True):
            partition_id = partition_ids[name]
            if partition_id == -1:
                futures.append(None)
                continue
            bucket = routing.prefix_bucket_of(row, prefix)
            await self._client.acquire(1)  # waits while the lookup queue is full
            futures.append(
                self._client.prefix_lookup(
                    self.table.path, self._bucket(partition_id, bucket), prefix, counted=1
                )
            )
        await _wait_all(futures)
        return [[] if f is None else f.result() for f in futures]

    def __repr__(self) -> str:
        return f"PrefixLookuper({self.table.path}, {list(self.columns)})"

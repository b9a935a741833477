"""What a KV tablet compiles from its table's schema, built once per table and shared by its tablets.

Every tablet needs the table's Arrow schema, a CompactedRow decoder, an empty changelog batch and the
key check's encoders and bucketers. Compiling them took about 5 ms per tablet, so a server taking the
leadership of a 2,048-bucket table spent ~10 s of its event loop building the same objects 2,048
times. They depend on the table's info only (the bucket a key check compares against is set per
tablet), and the tablets of a table share one TableInfo object (the server's table cache hands the
same one to every replica), so the cache is keyed by that object; an AlterTable brings a new one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import pyarrow as pa

from strom.common.table_descriptor import TableInfo
from strom.record.compacted_row import CompactedRowDecoder
from strom.server.tablet.kv.key_check import KeyCheck

__all__ = ["TableCodecs", "table_codecs"]

# tables whose codecs are kept (a server hosting more tables rebuilds the least recently used ones)
_CACHED_TABLES = 256


@dataclass(frozen=True)
class TableCodecs:
    arrow_schema: pa.Schema
    decoder: CompactedRowDecoder
    empty_records: pa.RecordBatch
    key_check: KeyCheck  # checks no bucket; `key_check.for_bucket(n)` is a tablet's own


# id(info) -> (info, codecs): the info is held, so its id is not reused while the entry lives
_cache: OrderedDict[int, tuple[TableInfo, TableCodecs]] = OrderedDict()
_lock = threading.Lock()  # tablets are built on the event loop and on the kv-open threads


def table_codecs(info: TableInfo) -> TableCodecs:
    """The codecs of `info`'s current schema, compiled on first use."""
    key = id(info)
    with _lock:
        entry = _cache.get(key)
        if entry is not None and entry[0] is info:
            _cache.move_to_end(key)
            return entry[1]
    arrow_schema = info.schema.to_arrow_schema()
    codecs = TableCodecs(
        arrow_schema=arrow_schema,
        decoder=CompactedRowDecoder(info.schema.row_type),
        empty_records=pa.RecordBatch.from_arrays(
            [pa.array([], f.type) for f in arrow_schema], schema=arrow_schema
        ),
        key_check=KeyCheck(info, None),
    )
    with _lock:
        _cache[key] = (info, codecs)
        while len(_cache) > _CACHED_TABLES:
            _cache.popitem(last=False)
    return codecs

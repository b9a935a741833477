"""Counting the retract rows (-U / -D) in the primary-key files pypaimon wrote.

Paimon keeps a key's delete as a ``-D`` row in its LSM files and drops it when reading merges the
files. Readers skip that merge for a bucket whose only file claims ``deleteRowCount = 0`` (the
"raw convertible" fast path of both pypaimon and Java Paimon). pypaimon 2.1 records 0 for every
file it writes, so a round that leaves a bucket with one file would show its deleted rows. The
writer therefore recounts the retract rows of each new file (one column, ``_VALUE_KIND``) and puts
the true count in the file's metadata before the commit message leaves the executor.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.orc as orc
import pyarrow.parquet as pq
from pypaimon.manifest.schema.data_file_meta import DataFileMeta
from pypaimon.table.file_store_table import FileStoreTable
from pypaimon.write.commit_message import CommitMessage

__all__ = ["VALUE_KIND_COLUMN", "count_retracts", "record_retract_counts"]

VALUE_KIND_COLUMN = "_VALUE_KIND"
# Paimon RowKind bytes of UPDATE_BEFORE and DELETE.
_RETRACT_KINDS = pa.array([1, 3], type=pa.int8())


def count_retracts(table: FileStoreTable, path: str) -> int:
    """How many rows of a key-value file at `path` retract their key."""
    with table.file_io.new_input_stream(path) as stream:
        if path.endswith(".parquet"):
            kinds = pq.read_table(stream, columns=[VALUE_KIND_COLUMN]).column(0)
        elif path.endswith(".orc"):
            kinds = orc.ORCFile(stream).read(columns=[VALUE_KIND_COLUMN]).column(0)
        else:
            raise ValueError(f"cannot count the retract rows of {path}: only parquet and orc are read")
    return int(pc.sum(pc.is_in(kinds, value_set=_RETRACT_KINDS)).as_py() or 0)


def _files(message: CommitMessage) -> Iterable[DataFileMeta]:
    yield from message.new_files
    yield from message.changelog_files


def record_retract_counts(table: FileStoreTable, messages: Iterable[CommitMessage]) -> None:
    """Set ``delete_row_count`` of every new data and changelog file to its real retract count."""
    for message in messages:
        for meta in _files(message):
            path = meta.physical_path()
            if not path:
                raise ValueError(f"pypaimon did not say where it wrote {meta.file_name}")
            meta.delete_row_count = count_retracts(table, path)

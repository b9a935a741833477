"""The format-independent part of a lake writer: its life cycle and the offsets it was given.

A writer takes non-empty batches until `complete` (empty ones are skipped), in offset order, and
reports how many rows it got and the range of offsets they cover. Formats convert and store rows.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from strom.lake.interface import ChangeTypes, LakeWriter, RowValues
from strom.lake.system_columns import OFFSET_COLUMN

__all__ = ["SplitWriter", "WrittenOffsets"]


@dataclass
class WrittenOffsets:
    """How many rows a writer was given and the range of offsets they cover."""

    records: int = 0
    # The first offset written, None before any row.
    start_offset: int | None = None
    # One past the largest offset written, None before any row.
    end_offset: int | None = None

    def add(self, offsets: pa.Array | pa.ChunkedArray) -> None:
        """Count a batch of rows by their offset column (rows arrive in offset order)."""
        self.records += len(offsets)
        if self.start_offset is None:
            self.start_offset = int(pc.min(offsets).as_py())
        self.end_offset = int(pc.max(offsets).as_py()) + 1


class SplitWriter(LakeWriter):
    """A LakeWriter that converts each batch to lake rows (`_lake_rows`), then stores them (`_store`)."""

    def __init__(self) -> None:
        self._written = WrittenOffsets()
        self._done = False

    def write(
        self,
        batch: pa.RecordBatch | pa.Table,
        change_types: ChangeTypes | None,
        offsets: RowValues,
        timestamps: RowValues,
    ) -> None:
        self._check_open()
        if batch.num_rows == 0:
            return
        rows = self._lake_rows(batch, change_types, offsets, timestamps)
        self._written.add(rows.column(OFFSET_COLUMN))
        self._store(rows, change_types)

    @abstractmethod
    def _lake_rows(
        self,
        batch: pa.RecordBatch | pa.Table,
        change_types: ChangeTypes | None,
        offsets: RowValues,
        timestamps: RowValues,
    ) -> pa.Table:
        """A non-empty batch as the lake table's rows, system columns included."""

    @abstractmethod
    def _store(self, rows: pa.Table, change_types: ChangeTypes | None) -> None:
        """Write (or keep until `complete`) rows made by `_lake_rows`."""

    def _check_open(self) -> None:
        if self._done:
            raise RuntimeError("the writer has completed")

    def _finish(self) -> None:
        """Start completing: the writer takes nothing more (and cannot complete twice)."""
        self._check_open()
        self._done = True

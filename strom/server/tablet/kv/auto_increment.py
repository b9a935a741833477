"""Auto-increment columns of primary-key tables: ids for new keys from cached ranges of a table sequence.

As Fluss (0.9): a PK table may have one non-key INT or BIGINT auto-increment column. When an upsert
creates a key, the leader fills that column with the next id of its cached range; updates of an
existing key never change it. Ranges of `table.auto-increment.cache-size` ids come from the table's
sequence, which the coordinator keeps (auto_increment_service.py) and which only grows, so no id is
ever handed out twice — a new leader, a restarted server or a dropped range leaves gaps, not
duplicates. Ids within one leader's term increase with the changelog offset.

Writers must name their target columns without the auto-increment column (a partial update); a
full-row upsert, or one that targets the column, is refused with INVALID_TARGET_COLUMN, as in Fluss.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from strom.common import config as cfg
from strom.common.errors import InvalidTargetColumnError, UnknownServerError
from strom.common.table_descriptor import TableInfo
from strom.common.types import DataTypeRoot
from strom.record.compacted_row import CompactedRowEncoder
from strom.server.tablet.kv.row_merger import RowFields

__all__ = ["AllocateIds", "AutoIncrementColumn", "auto_increment_column"]

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1

# (table id, column id, count) -> the first id of a fresh range of `count` ids
AllocateIds = Callable[[int, int, int], Awaitable[int]]


@dataclass
class AutoIncrementColumn:
    """One tablet's view of its table's auto-increment column: the cached ids and how to fill them."""

    table_id: int
    name: str
    index: int
    column_id: int
    max_value: int
    cache_size: int
    fields: RowFields
    encode: Callable[[int], bytes]
    # cached ranges, each [next, end]
    ranges: list[list[int]] = field(default_factory=list)

    @property
    def available(self) -> int:
        return sum(end - start + 1 for start, end in self.ranges)

    async def reserve(self, count: int, allocate: AllocateIds) -> None:
        """Make sure `count` ids are cached (one upsert batch can create at most that many keys)."""
        while self.available < count:
            start = await allocate(self.table_id, self.column_id, self.cache_size)
            self.ranges.append([start, start + self.cache_size - 1])

    def next_id(self) -> int:
        if not self.ranges:
            raise UnknownServerError(f"no auto-increment ids are cached for column '{self.name}'")
        current = self.ranges[0]
        value = current[0]
        if value > self.max_value:
            # Fluss: SequenceOverflowException, which has no error code of its own
            raise UnknownServerError(f'Reached maximum value of sequence "<{self.name}>" ({self.max_value}).')
        current[0] += 1
        if current[0] > current[1]:
            self.ranges.pop(0)
        return value

    def fill(self, value: bytes) -> bytes:
        """A new row's stored value with the column set to the next id."""
        fields = self.fields.split(value)
        fields[self.index] = self.encode(self.next_id())
        return self.fields.join(value[:2], fields)  # keeps the schema id in front

    def check_targets(self, target_columns: Sequence[int] | None) -> None:
        if target_columns is None or len(target_columns) == 0:
            raise InvalidTargetColumnError(
                f"The table contains an auto-increment column [{self.name}], but update target columns are "
                "not explicitly specified. Please specify the update target columns and exclude the "
                "auto-increment column from them."
            )
        if self.index in target_columns:
            raise InvalidTargetColumnError(
                f"Auto-increment column [{self.name}] at index {self.index} must not be included in target "
                "columns."
            )


def auto_increment_column(info: TableInfo) -> AutoIncrementColumn | None:
    """The table's auto-increment column, or None when it has none."""
    schema = info.schema
    if not schema.auto_increment_columns:
        return None
    name = schema.auto_increment_columns[0]
    index = schema.column_index(name)
    column = schema.columns[index]
    is_int = column.data_type.root is DataTypeRoot.INTEGER
    encoder = CompactedRowEncoder([column.data_type]).encode
    cache_size = info.properties.get(cfg.TABLE_AUTO_INCREMENT_CACHE_SIZE) or 1
    return AutoIncrementColumn(
        table_id=info.table_id,
        name=name,
        index=index,
        column_id=column.column_id,
        max_value=_INT_MAX if is_int else _LONG_MAX,
        cache_size=max(1, int(cache_size)),
        fields=RowFields(schema.row_type),
        encode=lambda v: encoder([v])[1:],  # the field without the one-field row's null byte
    )

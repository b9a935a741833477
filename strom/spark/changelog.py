"""Changelogs of primary-key tables as Arrow: change-type labels and folding changes into rows.

A primary-key table's log holds +I / -U / +U / -D changes. Its current contents are the last
change of every key, unless that change removes the row. Folding works column-wise: number the
rows in log order, take the highest number per key (one hash aggregation), keep the rows whose
change is an insert or update-after. A bucket holds all changes of its keys, so each bucket folds
on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from strom.record.change_type import ChangeType

# Indexed by ChangeType value.
_LABELS = pa.array([ChangeType(v).short_string for v in range(len(ChangeType))], pa.string())
_KEEPS = pa.array(
    [int(ChangeType.APPEND_ONLY), int(ChangeType.INSERT), int(ChangeType.UPDATE_AFTER)], pa.int8()
)
_SEQ = "__strom_seq"


def change_type_labels(change_types: pa.Array) -> pa.Array:
    """``+A``, ``+I``, ``-U``, ``+U``, ``-D`` for an array of change-type bytes."""
    return _LABELS.take(change_types.cast(pa.int32()))


def change_types_from_labels(labels: pa.Array) -> pa.Array:
    """The change-type bytes of an array of labels; unknown labels raise ValueError naming them."""
    index = pc.index_in(labels, value_set=_LABELS)
    if index.null_count:
        bad = pc.unique(pc.filter(labels, pc.is_null(index))).to_pylist()
        raise ValueError(f"Unknown change types {bad}: use '+I', '+U', '-U' or '-D' (or '+A' for appends).")
    return index.cast(pa.int8())


def fold_by_key(rows: pa.Table, change_types: pa.Array, key_columns: Sequence[str]) -> pa.Table:
    """The rows that survive once each key's changes are applied in order.

    `rows` and `change_types` are aligned and in log order (snapshot rows, as inserts, first).
    """
    if rows.num_rows == 0:
        return rows
    numbered = rows.select(list(key_columns)).append_column(_SEQ, pa.array(range(rows.num_rows), pa.int64()))
    last = numbered.group_by(list(key_columns), use_threads=False).aggregate([(_SEQ, "max")])
    positions = pc.sort_indices(last[f"{_SEQ}_max"])
    indexes = pc.take(last[f"{_SEQ}_max"], positions)
    survivors = pc.is_in(pc.take(change_types, indexes), value_set=_KEEPS)
    return rows.take(pc.filter(indexes, survivors))

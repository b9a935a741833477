"""What `Admin.alter_table` changes, Fluss's `TableChange`: add a column, set or reset an option."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from strom.common.alter_table import ALTER_CONFIG_DELETE, ALTER_CONFIG_SET, COLUMN_POSITION_LAST
from strom.common.type_strings import parse_data_type
from strom.common.types import DataType
from strom.rpc.gen import fluss_api_pb2 as pb


@dataclass(frozen=True, slots=True)
class AddColumn:
    name: str
    data_type: DataType
    comment: str | None = None


@dataclass(frozen=True, slots=True)
class SetOption:
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class ResetOption:
    key: str


TableChangeType = AddColumn | SetOption | ResetOption


class TableChange:
    """Builders of table changes:

    await admin.alter_table("shop.orders", [TableChange.add_column("note", "STRING"),
                                            TableChange.set_option("table.log.ttl", "3d")])
    """

    @staticmethod
    def add_column(
        name: str, data_type: DataType | pa.DataType | str, comment: str | None = None
    ) -> AddColumn:
        """A nullable column at the end; `data_type` is a Fluss type, a pyarrow type or a Fluss type
        string such as ``"STRING"`` or ``"DECIMAL(10, 2)"``."""
        if isinstance(data_type, str):
            data_type = parse_data_type(data_type)
        elif isinstance(data_type, pa.DataType):
            data_type = DataType.from_arrow(data_type)
        return AddColumn(name, data_type, comment)

    @staticmethod
    def set_option(key: str, value: str) -> SetOption:
        return SetOption(key, str(value))

    @staticmethod
    def reset_option(key: str) -> ResetOption:
        return ResetOption(key)


def fill_alter_table_request(request: pb.AlterTableRequest, changes: list[TableChangeType]) -> None:
    for change in changes:
        if isinstance(change, AddColumn):
            column = request.add_columns.add(
                column_name=change.name,
                data_type_json=json.dumps(change.data_type.to_json()).encode(),
                column_position_type=COLUMN_POSITION_LAST,
            )
            if change.comment is not None:
                column.comment = change.comment
        elif isinstance(change, SetOption):
            request.config_changes.add(
                config_key=change.key, config_value=change.value, op_type=ALTER_CONFIG_SET
            )
        elif isinstance(change, ResetOption):
            request.config_changes.add(config_key=change.key, op_type=ALTER_CONFIG_DELETE)
        else:
            raise TypeError(f"not a table change: {change!r} (build one with TableChange)")

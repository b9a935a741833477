"""Every schema a table has had, as a tablet server needs them after AlterTable added columns.

Batches keep the schema id they were written with; a writer still on an older schema is checked
against that schema, so the server loads the older versions once when it first learns the table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from strom.common.schema import Schema
from strom.common.table_path import TablePath
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb

CoordinatorRequest = Callable[[ApiKey, Any], Awaitable[Any]]


async def load_schema_history(
    request: CoordinatorRequest,
    path: TablePath,
    current_id: int,
    current: Schema,
    older: Iterable[int] | None = None,
) -> dict[int, Schema]:
    """Schemas 1..current_id of the table (the current one given, the older ones asked for), or
    only the `older` ids given."""
    history = {current_id: current}
    for schema_id in range(1, current_id) if older is None else older:
        message = pb.GetTableSchemaRequest(schema_id=schema_id)
        message.table_path.database_name = path.database_name
        message.table_path.table_name = path.table_name
        response = await request(ApiKey.GET_TABLE_SCHEMA, message)
        history[schema_id] = Schema.from_json_bytes(response.schema_json)
    return history

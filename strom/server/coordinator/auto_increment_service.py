"""Auto-increment id ranges for tablet servers (Strom-only API 9010).

Fluss's tablet servers draw ranges of `table.auto-increment.cache-size` ids from a ZooKeeper counter
per auto-increment column. Here the active coordinator keeps that counter in its metadata store (a
document per table and column holding the last id handed out) and hands out the next range. The
counter only grows and is written before the range is answered, so an id is never handed out twice,
across coordinator restarts and failovers alike; ranges a tablet server did not use are gaps.
"""

from __future__ import annotations

from strom.common.errors import TableNotExistError, UnknownServerError
from strom.rpc.gen import strom_internal_pb2 as internal
from strom.server.store.base import MetadataStore
from strom.server.store.ordered import OrderedStore

_PREFIX = "auto_increment"


def _key(table_id: int, column_id: int | None = None) -> str:
    return f"{_PREFIX}/{table_id}/" + ("" if column_id is None else f"col_{column_id}")


class AutoIncrementService:
    def __init__(self, store: OrderedStore) -> None:
        self.store = store

    async def allocate(
        self, request: internal.AllocateAutoIncrementIdsRequest, ctx: object
    ) -> internal.AllocateAutoIncrementIdsResponse:
        if request.count <= 0:
            raise UnknownServerError(f"an auto-increment range needs a positive size, got {request.count}")
        if self.store.get_table_by_id(request.table_id) is None:
            raise TableNotExistError(f"table id {request.table_id} does not exist")
        key = _key(request.table_id, request.column_id)

        def take_range(store: MetadataStore) -> int:
            # read and advance the counter in one transaction on the store thread: ranges never overlap
            stored = store.get_document(key)
            last = 0 if stored is None else int(stored)
            end = last + request.count
            if end > 2**63 - 1:
                # Fluss's SequenceOverflowException has no error code of its own either
                raise UnknownServerError(
                    f"the auto-increment sequence of table id {request.table_id} column id "
                    f"{request.column_id} is exhausted (last id {last})"
                )
            store.put_document(key, str(end).encode())
            return last

        last = await self.store.atomically(take_range)
        return internal.AllocateAutoIncrementIdsResponse(start=last + 1)

    async def drop_table(self, table_id: int) -> None:
        await self.store.delete_documents(_key(table_id))

"""A connection to one Strom (or Fluss) cluster: the entry point of the client.

It owns the pooled RPC connections and the metadata cache; the admin, tables and everything built
on them share both. Create it with ``await Connection.create({"bootstrap.servers": "host:9123"})``
or ``async with await Connection.create(...) as connection:``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from strom.client.admin import Admin, TablePathLike, as_table_path
from strom.client.closing import AsyncClosing
from strom.client.config import ClientConfig
from strom.client.metadata import MetadataCache
from strom.client.table import Table
from strom.common.errors import FlussError
from strom.rpc.client import ConnectionPool

log = logging.getLogger(__name__)

CloseHook = Callable[[], Awaitable[None]]


class Connection(AsyncClosing):
    def __init__(self, config: ClientConfig, pool: ConnectionPool, metadata: MetadataCache) -> None:
        """Use `Connection.create`, which also bootstraps the metadata."""
        self.config = config
        self.pool = pool
        self.metadata = metadata
        self._admin: Admin | None = None
        self._close_hooks: list[CloseHook] = []
        self._closed = False

    @classmethod
    async def create(cls, config: ClientConfig | Mapping[str, object] | None = None) -> Connection:
        """Connect: learn the coordinator and tablet servers from ``bootstrap.servers``."""
        client_config = ClientConfig.of(config)
        pool = ConnectionPool(
            connect_timeout=client_config.connect_timeout.total_seconds(),
            request_timeout=client_config.request_timeout.total_seconds(),
            sasl=client_config.sasl,
        )
        metadata = MetadataCache(
            pool,
            client_config.bootstrap_addresses,
            request_timeout=client_config.request_timeout.total_seconds(),
        )
        try:
            await metadata.bootstrap()
        except BaseException:
            await pool.close()
            raise
        return cls(client_config, pool, metadata)

    # ------------------------------------------------------------------ entry points

    def get_admin(self) -> Admin:
        self._check_open()
        if self._admin is None:
            self._admin = Admin(self.metadata, self.pool, self.config)
        return self._admin

    async def get_table(self, table_path: TablePathLike) -> Table:
        """A handle on an existing table; TableNotExistError when there is none.

        Its TableInfo comes from a fresh Metadata reply, which also caches its bucket leaders.
        """
        self._check_open()
        info = await self.metadata.refresh_table(as_table_path(table_path))
        return Table(self, info)

    # ------------------------------------------------------------------ lifecycle

    def add_close_hook(self, hook: CloseHook) -> None:
        """Run `hook` when the connection closes, before its network connections go (writers flush)."""
        self._close_hooks.append(hook)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise FlussError("The connection is closed.")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        hooks, self._close_hooks = self._close_hooks[::-1], []
        for hook in hooks:
            try:
                await hook()
            except Exception:
                log.exception("error while closing a client component")
        await self.pool.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ",".join(self.config.bootstrap_servers)
        return f"Connection({state})"

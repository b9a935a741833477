"""A connection to one Strom (or Fluss) cluster: the entry point of the client.

It owns the pooled RPC connections, the metadata cache and the machinery its tables share: the
writer client (log tables), the KV writer client (primary-key tables) and the lookup client, each
made on first use and closed with the connection, writers first so that queued rows are flushed
while the network connections are still there. Create it with
``await Connection.create({"bootstrap.servers": "host:9123"})`` or
``async with await Connection.create(...) as connection:``.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from strom.client.admin import Admin, TablePathLike, as_table_path
from strom.client.closing import AsyncClosing
from strom.client.config import ClientConfig
from strom.client.metadata import MetadataCache
from strom.client.table import Table
from strom.common.errors import FlussError
from strom.rpc.client import ConnectionPool

if TYPE_CHECKING:
    from strom.client.lookup.lookup_client import LookupClient
    from strom.client.scanner.log_scanner import LogScanner
    from strom.client.upsert.kv_writer_client import KvWriterClient
    from strom.client.writer.writer_client import WriterClient

log = logging.getLogger(__name__)

CloseHook = Callable[[], Awaitable[None]]


class Connection(AsyncClosing):
    def __init__(self, config: ClientConfig, pool: ConnectionPool, metadata: MetadataCache) -> None:
        """Use `Connection.create`, which also bootstraps the metadata."""
        self.config = config
        self.pool = pool
        self.metadata = metadata
        self._admin: Admin | None = None
        self._writer_client: WriterClient | None = None
        self._kv_writer_client: KvWriterClient | None = None
        self._lookup_client: LookupClient | None = None
        # Open log scanners, closed with the connection (weak: a dropped scanner needs no closing).
        self._scanners: weakref.WeakSet[LogScanner] = weakref.WeakSet()
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
            tls=client_config.tls,
        )
        metadata = MetadataCache(
            pool,
            client_config.bootstrap_addresses,
            request_timeout=client_config.request_timeout.total_seconds(),
        )
        for message in client_config.no_effect_settings():
            log.warning("%s", message)
        try:
            await metadata.bootstrap()
        except BaseException:
            await pool.close()
            raise
        connection = cls(client_config, pool, metadata)
        log.info("%r connected", connection)
        return connection

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

    # ------------------------------------------------------------------ owned machinery
    # Imported when first used: these modules import the table layer, which imports this one.

    @property
    def writer_client(self) -> WriterClient:
        """The accumulator and sender shared by every append writer of this connection."""
        self._check_open()
        if self._writer_client is None or self._writer_client.closed:
            from strom.client.writer.writer_client import WriterClient

            self._writer_client = WriterClient(self)
        return self._writer_client

    @property
    def kv_writer_client(self) -> KvWriterClient:
        """The accumulator and sender shared by every upsert writer of this connection."""
        self._check_open()
        if self._kv_writer_client is None or self._kv_writer_client.closed:
            from strom.client.upsert.kv_writer_client import KvWriterClient

            self._kv_writer_client = KvWriterClient(self)
        return self._kv_writer_client

    @property
    def lookup_client(self) -> LookupClient:
        """The lookup batching shared by every lookuper of this connection."""
        self._check_open()
        if self._lookup_client is None or self._lookup_client.closed:
            from strom.client.lookup.lookup_client import LookupClient

            self._lookup_client = LookupClient(self)
        return self._lookup_client

    def track_scanner(self, scanner: LogScanner) -> None:
        self._check_open()
        self._scanners.add(scanner)

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
        # Writers flush before lookups stop; all of them before the network connections go.
        owned = (self._writer_client, self._kv_writer_client, self._lookup_client, *self._scanners)
        self._writer_client = self._kv_writer_client = self._lookup_client = None
        self._scanners = weakref.WeakSet()
        for component in owned:
            if component is not None:
                hooks.append(component.close)
        for hook in hooks:
            try:
                await hook()
            except Exception:
                log.exception("%r: error while closing a client component", self)
        await self.pool.close()

    def __repr__(self) -> str:
        # client.id names the connection in log lines (the Fluss wire carries no client id)
        name = f"{self.config.client_id}@" if self.config.client_id else ""
        state = "closed" if self._closed else ",".join(self.config.bootstrap_servers)
        return f"Connection({name}{state})"

"""The client's metadata cache: bootstraps from ``bootstrap.servers`` and keeps the `Cluster` fresh.

Fluss's client flow, which this follows:

- bootstrap: an empty Metadata request to a bootstrap server yields the coordinator and the live
  tablet servers. With one bootstrap address it is retried three times (100, 200, 400 ms) while
  the server may be starting; with several, each is tried once in turn.
- table, partition and leader metadata: a Metadata request naming the tables, partitions or
  partition ids, sent to a random live tablet server. A server that fails with a retriable error
  is skipped and the next one tried; then the coordinator; when every server failed, the cluster
  is bootstrapped again and the request sent once more.

Concurrent refreshes asking for the same things share one request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from strom.client.backoff import BOOTSTRAP_BACKOFF
from strom.client.cluster import Cluster, ServerNode
from strom.common.errors import (
    FlussError,
    NetworkError,
    PartitionNotExistError,
    RequestTimeoutError,
    TableNotExistError,
)
from strom.common.supervision import spawn
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.rpc.api import ApiKey
from strom.rpc.client import ConnectionPool
from strom.rpc.gen import fluss_api_pb2 as pb

log = logging.getLogger(__name__)

BOOTSTRAP_RETRIES = 3

_RequestKey = tuple[frozenset[TablePath], frozenset[PhysicalTablePath], frozenset[int]]


class MetadataCache:
    def __init__(
        self,
        pool: ConnectionPool,
        bootstrap_servers: Sequence[tuple[str, int]],
        *,
        request_timeout: float,
    ) -> None:
        if not bootstrap_servers:
            raise ValueError("no bootstrap servers")
        self.pool = pool
        self.bootstrap_servers = list(bootstrap_servers)
        self.request_timeout = request_timeout
        self._cluster = Cluster()
        self._inflight: dict[_RequestKey, asyncio.Task[None]] = {}
        self._bootstrapping: asyncio.Task[None] | None = None

    @property
    def cluster(self) -> Cluster:
        """The current snapshot. Never mutated; refreshes replace it."""
        return self._cluster

    # ------------------------------------------------------------------ lookups in the snapshot

    @property
    def coordinator(self) -> ServerNode | None:
        return self._cluster.coordinator

    def tablet_server(self, server_id: int) -> ServerNode | None:
        return self._cluster.tablet_server(server_id)

    def table_info(self, path: TablePath) -> TableInfo | None:
        return self._cluster.table_info(path)

    def leader_for(self, bucket: TableBucket) -> ServerNode | None:
        return self._cluster.leader_for(bucket)

    def partition_id(self, path: TablePath, partition_name: str) -> int | None:
        return self._cluster.partition_id(PhysicalTablePath(path, partition_name))

    def partition_name(self, partition_id: int) -> str | None:
        return self._cluster.partition_name(partition_id)

    # ------------------------------------------------------------------ bootstrap

    async def bootstrap(self) -> Cluster:
        """(Re)learn the coordinator and tablet servers from the bootstrap servers.

        Concurrent callers share one attempt. Table metadata already cached is kept.
        """
        if self._bootstrapping is None:
            self._bootstrapping = _shared_task(self._bootstrap_and_apply(), self._bootstrap_done)
        await asyncio.shield(self._bootstrapping)
        return self._cluster

    async def _bootstrap_and_apply(self) -> None:
        fresh = await self._bootstrap_once()
        self._cluster = self._cluster.with_servers_of(fresh)

    def _bootstrap_done(self, task: asyncio.Task[None]) -> None:
        self._bootstrapping = None

    async def _bootstrap_once(self) -> Cluster:
        errors: list[str] = []
        last: FlussError | None = None
        single = len(self.bootstrap_servers) == 1
        for host, port in self.bootstrap_servers:
            try:
                response = await self._bootstrap_from(host, port, BOOTSTRAP_RETRIES if single else 0)
            except FlussError as e:
                log.warning("cannot initialize from bootstrap server %s:%d: %s", host, port, e)
                errors.append(f"{host}:{port}: {e}")
                last = e
                continue
            return Cluster().with_metadata(response)
        assert last is not None
        servers = ",".join(f"{h}:{p}" for h, p in self.bootstrap_servers)
        raise type(last)(
            f"Failed to initialize the connection to the bootstrap servers {servers}: " + "; ".join(errors)
        ) from last

    async def _bootstrap_from(self, host: str, port: int, retries: int) -> pb.MetadataResponse:
        attempt = 0
        while True:
            try:
                connection = await self.pool.get(host, port)
            except FlussError as e:
                if not e.retriable or attempt >= retries:
                    raise
            else:
                try:
                    response: pb.MetadataResponse = await connection.request(
                        ApiKey.GET_METADATA, pb.MetadataRequest(), timeout=self.request_timeout
                    )
                    return response
                except (NetworkError, RequestTimeoutError):
                    # A stuck or broken connection is dropped so the retry opens a new one.
                    connection.close()
                    if attempt >= retries:
                        raise
            await BOOTSTRAP_BACKOFF.sleep(attempt)
            attempt += 1

    async def coordinator_node(self) -> ServerNode:
        """The coordinator, bootstrapping first when it is not known."""
        node = self._cluster.coordinator
        if node is None:
            node = (await self.bootstrap()).coordinator
        if node is None:
            raise NetworkError("The cluster metadata names no coordinator server.")
        return node

    # ------------------------------------------------------------------ refreshes

    async def update(
        self,
        table_paths: Iterable[TablePath] = (),
        partition_paths: Iterable[PhysicalTablePath] = (),
        partition_ids: Iterable[int] = (),
    ) -> Cluster:
        """Ask for metadata of these tables, partitions (by name) and partition ids, and merge it.

        Raises TableNotExistError / PartitionNotExistError when the server knows no such thing.
        """
        key: _RequestKey = (frozenset(table_paths), frozenset(partition_paths), frozenset(partition_ids))
        task = self._inflight.get(key)
        if task is None:
            task = _shared_task(self._update(key), lambda _: self._inflight.pop(key, None))
            self._inflight[key] = task
        await asyncio.shield(task)
        return self._cluster

    async def _update(self, key: _RequestKey) -> None:
        request = pb.MetadataRequest()
        for path in key[0]:
            request.table_path.add(database_name=path.database_name, table_name=path.table_name)
        for physical in key[1]:
            request.partitions_path.add(
                database_name=physical.database_name,
                table_name=physical.table_name,
                partition_name=physical.partition_name,
            )
        request.partitions_id.extend(sorted(key[2]))
        response = await self._send_metadata_request(request)
        self._cluster = self._cluster.with_metadata(response)

    async def _send_metadata_request(self, request: pb.MetadataRequest) -> pb.MetadataResponse:
        tried_tablets: set[int] = set()
        tried_coordinator = False
        rebootstrapped = False
        last: FlussError | None = None
        while True:
            cluster = self._cluster
            node = cluster.random_tablet_server(exclude=tried_tablets)
            if node is None and not tried_coordinator and cluster.coordinator is not None:
                node = cluster.coordinator
            if node is None:
                if rebootstrapped:
                    assert last is not None
                    raise last
                # Every known server failed (or none is known): start over from the bootstrap servers.
                await self.bootstrap()
                rebootstrapped = True
                tried_tablets.clear()
                tried_coordinator = False
                continue
            try:
                response: pb.MetadataResponse = await self.pool.request(
                    node.host, node.port, ApiKey.GET_METADATA, request, timeout=self.request_timeout
                )
                return response
            except FlussError as e:
                if not e.retriable:
                    raise
                log.info("metadata request to %s failed (%s); trying another server", node, e)
                last = e
                if node is cluster.coordinator:
                    tried_coordinator = True
                else:
                    tried_tablets.add(node.id)

    async def refresh_table(self, path: TablePath) -> TableInfo:
        """Fetch a table's metadata (schema id, descriptor, bucket leaders) and return its TableInfo."""
        await self.update(table_paths=[path])
        info = self._cluster.table_info(path)
        if info is None:
            raise TableNotExistError(f"Table '{path}' does not exist.")
        return info

    async def refresh_tables(self, paths: Iterable[TablePath]) -> None:
        await self.update(table_paths=paths)

    async def refresh_partitions(self, path: TablePath, partitions: Iterable[str | int]) -> None:
        """Fetch the metadata of partitions of `path`, given by name or by id.

        The table itself is refreshed along with them, so a reply can always be matched to it.
        """
        if isinstance(partitions, str | int):
            raise TypeError("partitions must be a collection of names or ids")
        items = list(partitions)
        names = [p for p in items if isinstance(p, str)]
        ids = [p for p in items if not isinstance(p, str)]
        await self.update(
            table_paths=[path],
            partition_paths=[PhysicalTablePath(path, name) for name in names],
            partition_ids=ids,
        )

    async def get_table_info(self, path: TablePath) -> TableInfo:
        """The cached TableInfo, fetched first when the table is not cached yet."""
        info = self._cluster.table_info(path)
        return info if info is not None else await self.refresh_table(path)

    async def get_partition_id(self, path: TablePath, partition_name: str) -> int:
        """The id of a partition, fetched first when not cached; PartitionNotExistError if none."""
        physical = PhysicalTablePath(path, partition_name)
        partition_id = self._cluster.partition_id(physical)
        if partition_id is None:
            await self.refresh_partitions(path, [partition_name])
            partition_id = self._cluster.partition_id(physical)
        if partition_id is None:
            raise PartitionNotExistError(f"Partition '{partition_name}' of table '{path}' does not exist.")
        return partition_id

    async def refresh_leaders(self, path: TablePath, partition_id: int | None = None) -> None:
        """Refresh the bucket leaders of a table, or of one of its partitions."""
        if partition_id is None:
            await self.update(table_paths=[path])
        else:
            await self.update(table_paths=[path], partition_ids=[partition_id])

    # ------------------------------------------------------------------ invalidation

    def invalidate(
        self,
        *,
        table_paths: Iterable[TablePath] = (),
        physical_paths: Iterable[PhysicalTablePath] = (),
        server_id: int | None = None,
    ) -> None:
        """Forget bucket locations (and optionally a tablet server) so the next use refreshes them."""
        cluster = self._cluster
        paths = set(physical_paths)
        wanted = set(table_paths)
        if wanted:
            paths.update(p for p in cluster.buckets if p.table_path in wanted)
        if paths:
            cluster = cluster.without_buckets(paths)
        if server_id is not None:
            cluster = cluster.without_server(server_id)
        self._cluster = cluster

    def remember_table_info(self, info: TableInfo) -> None:
        """Replace a cached TableInfo with a fresher one read through the admin API."""
        self._cluster = self._cluster.with_table_info(info)

    def forget_table(self, path: TablePath) -> None:
        """Drop everything cached about a table (after it was dropped)."""
        self._cluster = self._cluster.without_table(path)

    def forget_partition(self, path: TablePath, partition_name: str) -> None:
        self._cluster = self._cluster.without_partition(PhysicalTablePath(path, partition_name))


def _shared_task(
    work: Coroutine[Any, Any, None], on_done: Callable[[asyncio.Task[None]], object]
) -> asyncio.Task[None]:
    """Run `work` as its own task, so that a caller giving up does not cancel it for the others."""
    # quiet: its callers see its error, and if every caller gave up, spawn still retrieves it
    task = spawn(work, name="metadata-update", quiet=True)
    task.add_done_callback(on_done)
    return task

"""The metadata store on ZooKeeper, in Fluss's znode layout (`strom/server/zookeeper/layout.py`).

Only the active coordinator writes, so the store keeps a mirror of everything in memory (loaded when
the coordinator takes over) and serves reads from it; every write goes to ZooKeeper first. Writes are
ZooKeeper transactions (multi-ops): a `transaction()` block becomes one, so it applies whole or not
at all, and every one of them starts with a version check of /coordinators/epoch, the node this
coordinator bumped when it took over. Once a newer coordinator bumps it, the old one's writes fail:
`on_fenced` tells the coordinator to step down, and the caller gets NOT_COORDINATOR_LEADER.

A write whose outcome is unknown (the connection dropped during the commit) marks the mirror stale;
it is loaded again from ZooKeeper before the next use.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError

from strom.common.errors import NotCoordinatorLeaderError, StorageError
from strom.server.store.base import (
    BucketAssignment,
    DatabaseRecord,
    MetadataStore,
    PartitionRecord,
    TableRecord,
)
from strom.server.zookeeper import layout
from strom.server.zookeeper.layout import ZkPaths

log = logging.getLogger(__name__)

_MISSING = object()
BucketKey = tuple[int, int | None, int]


class ZooKeeperMetadataStore(MetadataStore):
    def __init__(
        self, client: KazooClient, paths: ZkPaths, on_fenced: Callable[[], None] | None = None
    ) -> None:
        self.zk = client
        self.paths = paths
        self.on_fenced = on_fenced
        self._lock = threading.RLock()  # the mirror; never held across a ZooKeeper round trip
        self._write_lock = threading.RLock()  # one transaction at a time, built and committed in order
        self._epoch = 0
        self._epoch_version: int | None = None  # version of /coordinators/epoch after our bump
        # a transaction in progress: znode operations, and how to undo the mirror if it fails
        self._ops: list[tuple[str, str, bytes | None]] | None = None
        self._undo: list[tuple[dict[Any, Any] | set[Any], Any, Any]] = []
        self._depth = 0
        self._stale = False
        for path in (
            paths.databases,
            paths.table_assignments,
            paths.partition_assignments,
            paths.documents,
            paths.server_ids,
            paths.coordinator_ids,
        ):
            client.ensure_path(path)
        self._load()

    # ---- the mirror

    def _load(self) -> None:
        """Read everything this store serves from ZooKeeper."""
        self._databases: dict[str, DatabaseRecord] = {}
        self._tables: dict[int, TableRecord] = {}
        self._table_ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[tuple[int, int], bytes] = {}
        self._partitions: dict[int, PartitionRecord] = {}
        self._partition_ids: dict[tuple[int, str], int] = {}
        self._buckets: dict[BucketKey, BucketAssignment] = {}
        self._documents: dict[str, bytes] = {}
        # every znode under the trees this store writes: creates need their parents, deletes their
        # children, and a transaction cannot ask ZooKeeper in between
        self._nodes: set[str] = set()
        p = self.paths
        for tree in (p.databases, p.table_assignments, p.partition_assignments, p.documents):
            self._walk(tree)
        data = self._get_many(self._nodes)
        children: dict[str, list[str]] = {}
        for node in sorted(self._nodes):
            parent, _, name = node.rpartition("/")
            children.setdefault(parent, []).append(name)

        for database in children.get(p.databases, []):
            self._databases[database] = layout.parse_database_registration(
                database, data[p.database(database)][0]
            )
            for name in children.get(p.tables(database), []):
                schemas = {
                    int(c): data[p.schema(database, name, int(c))][0]
                    for c in children.get(p.schemas(database, name), [])
                    if c.isdigit()
                }
                if not schemas:
                    log.warning("table %s.%s has no schema in ZooKeeper; skipping it", database, name)
                    continue
                current = max(schemas)
                record = layout.parse_table_registration(
                    database, name, data[p.table(database, name)][0], current, schemas[current]
                )
                self._tables[record.table_id] = record
                self._table_ids[(database, name)] = record.table_id
                for schema_id, schema in schemas.items():
                    self._schemas[(record.table_id, schema_id)] = schema
                for partition_name in children.get(p.partitions(database, name), []):
                    value, ctime = data[p.partition(database, name, partition_name)]
                    partition = layout.parse_partition_registration(partition_name, value, ctime)
                    self._partitions[partition.partition_id] = partition
                    self._partition_ids[(partition.table_id, partition_name)] = partition.partition_id
        for tree in (p.table_assignments, p.partition_assignments):
            for child in children.get(tree, []):
                owner_table, replicas = layout.parse_assignment(data[f"{tree}/{child}"][0])
                if tree == p.table_assignments:
                    table_id, partition_id = int(child), None
                else:
                    assert owner_table is not None, f"{tree}/{child} names no table"
                    table_id, partition_id = owner_table, int(child)
                for bucket, bucket_replicas in replicas.items():
                    leader_isr = data.get(p.leader_isr(table_id, partition_id, bucket))
                    if leader_isr is not None:
                        a = layout.parse_leader_and_isr(
                            table_id, partition_id, bucket, bucket_replicas, leader_isr[0]
                        )
                        self._buckets[a.key] = a
        for child in children.get(p.documents, []):
            self._documents[ZkPaths.document_key(child)] = data[f"{p.documents}/{child}"][0]
        self._stale = False

    def _walk(self, root: str) -> None:
        level = [root]
        while level:
            self._nodes.update(level)
            requests = [(path, self.zk.get_children_async(path)) for path in level]
            level = []
            for path, request in requests:
                try:
                    level += [f"{path}/{child}" for child in request.get()]
                except NoNodeError:
                    self._nodes.discard(path)

    def _get_many(self, paths: set[str]) -> dict[str, tuple[bytes, int]]:
        """Data and creation time (ms) of many znodes at once."""
        requests = [(path, self.zk.get_async(path)) for path in paths]
        found = {}
        for path, request in requests:
            try:
                value, stat = request.get()
            except NoNodeError:
                continue
            found[path] = (value or b"", stat.ctime)
        return found

    def _fresh(self) -> None:
        if self._stale:
            log.info("reloading metadata from ZooKeeper after an interrupted write")
            try:
                self._load()
            except (KazooException, KazooTimeoutError) as e:
                raise StorageError(f"ZooKeeper is unavailable: {e}") from e

    # mirror changes inside a transaction can be undone

    def _put(self, mapping: dict[Any, Any], key: Any, value: Any) -> None:
        self._undo.append((mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def _pop(self, mapping: dict[Any, Any], key: Any) -> None:
        if key in mapping:
            self._undo.append((mapping, key, mapping.pop(key)))

    def _add_node(self, path: str) -> None:
        if path not in self._nodes:
            self._undo.append((self._nodes, path, _MISSING))
            self._nodes.add(path)

    def _remove_node(self, path: str) -> None:
        if path in self._nodes:
            self._undo.append((self._nodes, path, True))
            self._nodes.discard(path)

    def _rollback(self, undo: list[tuple[dict[Any, Any] | set[Any], Any, Any]]) -> None:
        for container, key, old in reversed(undo):
            if isinstance(container, set):
                if old is _MISSING:
                    container.discard(key)
                else:
                    container.add(key)
            elif old is _MISSING:
                container.pop(key, None)
            else:
                container[key] = old

    # znode operations, collected into the current transaction

    def _create(self, path: str, value: bytes) -> None:
        parent = path.rsplit("/", 1)[0]
        missing = []
        while parent and parent not in self._nodes:
            missing.append(parent)
            parent = parent.rsplit("/", 1)[0]
        for ancestor in reversed(missing):
            self._op("create", ancestor, b"")
            self._add_node(ancestor)
        self._op("create", path, value)
        self._add_node(path)

    def _set(self, path: str, value: bytes) -> None:
        if path in self._nodes:
            self._op("set", path, value)
        else:
            self._create(path, value)

    def _delete_tree(self, path: str) -> None:
        prefix = path + "/"
        doomed = [n for n in self._nodes if n.startswith(prefix)]
        for node in sorted(doomed, key=lambda n: n.count("/"), reverse=True):
            self._op("delete", node, None)
            self._remove_node(node)
        if path in self._nodes:
            self._op("delete", path, None)
            self._remove_node(path)

    def _op(self, kind: str, path: str, value: bytes | None) -> None:
        assert self._ops is not None, "znode operations happen inside a transaction"
        self._ops.append((kind, path, value))

    def _after(
        self, undo: list[tuple[dict[Any, Any] | set[Any], Any, Any]]
    ) -> list[tuple[dict[Any, Any] | set[Any], Any, Any]]:
        """What the entries `undo` would restore hold now (the state after the transaction)."""
        after: dict[tuple[int, Any], tuple[dict[Any, Any] | set[Any], Any, Any]] = {}
        for container, key, _ in undo:
            if (id(container), key) in after:
                continue
            if isinstance(container, set):
                now: Any = True if key in container else _MISSING
            else:
                now = container.get(key, _MISSING)
            after[(id(container), key)] = (container, key, now)
        return list(after.values())

    def _apply(self, redo: list[tuple[dict[Any, Any] | set[Any], Any, Any]]) -> None:
        self._rollback(redo)  # restoring the "after" state is applying it

    @contextmanager
    def transaction(self) -> Iterator[None]:
        # Readers see committed state only. A transaction is built on the mirror under `_lock`; then
        # the mirror goes back to its state before it while ZooKeeper commits, and forward once the
        # commit succeeded. The round trip happens without `_lock`, so reads (on the coordinator's
        # event loop) never wait for the network; `_write_lock` keeps a second writer from building
        # on the mirror until the first has committed.
        with self._write_lock:
            with self._lock:
                outer = self._depth == 0
                if outer:
                    self._fresh()
                    self._ops, self._undo = [], []
                self._depth += 1
                try:
                    yield
                except BaseException:
                    self._depth -= 1
                    if outer:
                        self._rollback(self._undo)
                        self._ops, self._undo = None, []
                    raise
                self._depth -= 1
                if not outer:
                    return
                ops, undo = self._ops or [], self._undo
                self._ops, self._undo = None, []
                redo = self._after(undo)
                self._rollback(undo)
            self._commit(ops)
            with self._lock:
                self._apply(redo)

    def _commit(self, ops: list[tuple[str, str, bytes | None]]) -> None:
        if not ops:
            return
        t = self.zk.transaction()
        if self._epoch_version is not None:
            t.check(self.paths.coordinator_epoch, self._epoch_version)
        for kind, path, value in ops:
            if kind == "create":
                t.create(path, value or b"")
            elif kind == "set":
                t.set_data(path, value or b"")
            else:
                t.delete(path)
        try:
            results = t.commit()
        except (KazooException, KazooTimeoutError) as e:
            self._stale = True  # it may or may not have been applied
            raise StorageError(f"ZooKeeper write failed, outcome unknown: {type(e).__name__}") from e
        if not any(isinstance(r, Exception) for r in results):
            return
        if self._epoch_version is not None:
            if isinstance(results[0], BadVersionError):
                log.error("a newer coordinator took over: this coordinator is fenced")
                if self.on_fenced is not None:
                    self.on_fenced()
                raise NotCoordinatorLeaderError(
                    "this coordinator has been replaced by a newer one; send the request to the active one"
                )
            results = results[1:]
        refused = [
            f"{kind} {path}: {type(r).__name__}"
            for (kind, path, _), r in zip(ops, results, strict=True)
            if isinstance(r, Exception) and not isinstance(r, RolledBackError)
        ]
        self._stale = True  # ZooKeeper differs from the mirror: read it again
        raise StorageError(f"metadata write refused by ZooKeeper: {'; '.join(refused)}")

    # ---- ids and the coordinator epoch

    def next_id(self, kind: str) -> int:
        path = self.paths.sequence(kind)
        while True:
            try:
                value, stat = self.zk.get(path)
            except NoNodeError:
                with suppress(NodeExistsError):
                    self.zk.create(path, layout.encode_counter(0), makepath=True)
                continue
            current = layout.decode_counter(value)
            try:
                self.zk.set(path, layout.encode_counter(current + 1), version=stat.version)
                return current
            except BadVersionError:
                continue  # someone else took this one

    def bump_coordinator_epoch(self) -> int:
        """Fluss's fenceBecomeCoordinatorLeader: epoch + 1, only if nobody bumped it meanwhile."""
        path = self.paths.coordinator_epoch
        with suppress(NodeExistsError):
            self.zk.create(path, b"0", makepath=True)
        value, stat = self.zk.get(path)
        epoch = int(value.decode() or "0") + 1
        try:
            new_stat = self.zk.set(path, str(epoch).encode(), version=stat.version)
        except BadVersionError:
            raise NotCoordinatorLeaderError("another coordinator took over while this one did") from None
        self._epoch = epoch
        self._epoch_version = new_stat.version
        return epoch

    # ---- databases

    def create_database(self, record: DatabaseRecord) -> None:
        with self.transaction():
            self._create(self.paths.database(record.name), layout.database_registration(record))
            self._create(self.paths.tables(record.name), b"")
            self._put(self._databases, record.name, record)

    def get_database(self, name: str) -> DatabaseRecord | None:
        with self._lock:
            self._fresh()
            return self._databases.get(name)

    def list_databases(self) -> list[DatabaseRecord]:
        with self._lock:
            self._fresh()
            return [self._databases[name] for name in sorted(self._databases)]

    def update_database(self, record: DatabaseRecord) -> None:
        with self.transaction():
            old = self._databases.get(record.name)
            if old is None:
                return
            updated = DatabaseRecord(
                record.name, record.database_json, old.created_time, record.modified_time
            )
            self._set(self.paths.database(record.name), layout.database_registration(updated))
            self._put(self._databases, record.name, updated)

    def drop_database(self, name: str) -> None:
        with self.transaction():
            if name in self._databases:
                for table_id in [t.table_id for t in self._tables.values() if t.database == name]:
                    self.drop_table(table_id)
                self._delete_tree(self.paths.database(name))
                self._pop(self._databases, name)

    # ---- tables

    def create_table(self, record: TableRecord, schema_json: bytes) -> None:
        with self.transaction():
            p = self.paths
            self._create(p.table(record.database, record.name), layout.table_registration(record))
            self._create(p.schemas(record.database, record.name), b"")
            self._create(p.partitions(record.database, record.name), b"")
            self._put(self._tables, record.table_id, record)
            self._put(self._table_ids, (record.database, record.name), record.table_id)
            self.add_schema(record.table_id, record.schema_id, schema_json)

    def get_table(self, database: str, name: str) -> TableRecord | None:
        with self._lock:
            self._fresh()
            table_id = self._table_ids.get((database, name))
            return None if table_id is None else self._tables.get(table_id)

    def get_table_by_id(self, table_id: int) -> TableRecord | None:
        with self._lock:
            self._fresh()
            return self._tables.get(table_id)

    def list_tables(self, database: str | None = None) -> list[TableRecord]:
        with self._lock:
            self._fresh()
            if database is None:
                return [self._tables[i] for i in sorted(self._tables)]
            return sorted((t for t in self._tables.values() if t.database == database), key=lambda t: t.name)

    def update_table(self, record: TableRecord) -> None:
        with self.transaction():
            if record.table_id not in self._tables:
                return
            old = self._tables[record.table_id]
            updated = TableRecord(
                old.table_id,
                old.database,
                old.name,
                record.schema_id,
                record.table_json,
                old.created_time,
                record.modified_time,
            )
            self._set(self.paths.table(old.database, old.name), layout.table_registration(updated))
            self._put(self._tables, record.table_id, updated)

    def drop_table(self, table_id: int) -> None:
        with self.transaction():
            record = self._tables.get(table_id)
            if record is None:
                return
            for partition in [p for p in self._partitions.values() if p.table_id == table_id]:
                self.drop_partition(partition.partition_id)
            self._delete_tree(self.paths.table(record.database, record.name))
            self._delete_tree(self.paths.assignment(table_id, None))
            self._pop(self._tables, table_id)
            self._pop(self._table_ids, (record.database, record.name))
            for schema_key in [k for k in self._schemas if k[0] == table_id]:
                self._pop(self._schemas, schema_key)
            for bucket_key in [k for k in self._buckets if k[0] == table_id]:
                self._pop(self._buckets, bucket_key)

    def add_schema(self, table_id: int, schema_id: int, schema_json: bytes) -> None:
        with self.transaction():
            record = self._tables.get(table_id)
            if record is None:
                raise StorageError(f"no table with id {table_id} to add schema {schema_id} to")
            self._create(self.paths.schema(record.database, record.name, schema_id), schema_json)
            self._put(self._schemas, (table_id, schema_id), schema_json)

    def get_schema(self, table_id: int, schema_id: int) -> bytes | None:
        with self._lock:
            self._fresh()
            return self._schemas.get((table_id, schema_id))

    # ---- partitions

    def create_partition(self, record: PartitionRecord) -> None:
        with self.transaction():
            table = self._tables.get(record.table_id)
            if table is None:
                raise StorageError(f"no table with id {record.table_id} for partition {record.name}")
            self._create(
                self.paths.partition(table.database, table.name, record.name),
                layout.partition_registration(record),
            )
            self._put(self._partitions, record.partition_id, record)
            self._put(self._partition_ids, (record.table_id, record.name), record.partition_id)

    def get_partition(self, table_id: int, name: str) -> PartitionRecord | None:
        with self._lock:
            self._fresh()
            partition_id = self._partition_ids.get((table_id, name))
            return None if partition_id is None else self._partitions.get(partition_id)

    def get_partition_by_id(self, partition_id: int) -> PartitionRecord | None:
        with self._lock:
            self._fresh()
            return self._partitions.get(partition_id)

    def list_partitions(self, table_id: int) -> list[PartitionRecord]:
        with self._lock:
            self._fresh()
            return sorted(
                (p for p in self._partitions.values() if p.table_id == table_id), key=lambda p: p.partition_id
            )

    def drop_partition(self, partition_id: int) -> None:
        with self.transaction():
            record = self._partitions.get(partition_id)
            if record is None:
                return
            table = self._tables.get(record.table_id)
            if table is not None:
                self._delete_tree(self.paths.partition(table.database, table.name, record.name))
            self._delete_tree(self.paths.assignment(record.table_id, partition_id))
            self._pop(self._partitions, partition_id)
            self._pop(self._partition_ids, (record.table_id, record.name))
            for key in [k for k in self._buckets if k[1] == partition_id]:
                self._pop(self._buckets, key)

    # ---- buckets

    def put_buckets(self, assignments: list[BucketAssignment]) -> None:
        with self.transaction():
            p = self.paths
            touched: dict[tuple[int, int | None], bool] = {}
            for a in assignments:
                owner = (a.table_id, a.partition_id)
                old = self._buckets.get(a.key)
                if old is None or old.replicas != a.replicas:
                    touched[owner] = True
                else:
                    touched.setdefault(owner, False)
                self._put(self._buckets, a.key, a)
            for (table_id, partition_id), replicas_changed in touched.items():
                path = p.assignment(table_id, partition_id)
                if replicas_changed or path not in self._nodes:
                    replicas = {
                        b.bucket_id: b.replicas
                        for b in self._buckets.values()
                        if b.table_id == table_id and b.partition_id == partition_id
                    }
                    self._set(path, layout.assignment(table_id, partition_id, replicas))
            for a in assignments:
                self._set(p.leader_isr(*a.key), layout.leader_and_isr(a, self._epoch))

    def list_buckets(self, table_id: int | None = None) -> list[BucketAssignment]:
        with self._lock:
            self._fresh()
            if table_id is None:
                return list(self._buckets.values())
            return [b for b in self._buckets.values() if b.table_id == table_id]

    # ---- documents

    def put_document(self, key: str, value: bytes) -> None:
        with self.transaction():
            self._set(self.paths.document(key), value)
            self._put(self._documents, key, value)

    def get_document(self, key: str) -> bytes | None:
        with self._lock:
            self._fresh()
            return self._documents.get(key)

    def list_documents(self, prefix: str) -> list[tuple[str, bytes]]:
        with self._lock:
            self._fresh()
            return sorted((k, v) for k, v in self._documents.items() if k.startswith(prefix))

    def delete_documents(self, prefix: str) -> None:
        with self.transaction():
            for key in [k for k in self._documents if k.startswith(prefix)]:
                self._delete_tree(self.paths.document(key))
                self._pop(self._documents, key)

    def close(self) -> None:
        """The ZooKeeper client belongs to the coordinator process, which closes it."""

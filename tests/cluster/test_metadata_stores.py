"""Both metadata stores behind one contract: the embedded SQLite file and ZooKeeper (a real ZooKeeper
server process), including transactions that apply whole or not at all, durability across reopening,
and, on ZooKeeper, the fencing of a coordinator that another one replaced."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strom.common.config import Configuration
from strom.common.errors import NotCoordinatorLeaderError
from strom.server.store.base import (
    BucketAssignment,
    DatabaseRecord,
    MetadataStore,
    PartitionRecord,
    TableRecord,
)
from strom.server.store.sqlite import SqliteMetadataStore
from strom.server.zookeeper.local_server import LocalZooKeeper

Opener = Callable[[], MetadataStore]


@pytest.fixture(params=["sqlite", "zookeeper"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    opened: list[MetadataStore] = []
    if request.param == "sqlite":

        def open_sqlite() -> MetadataStore:
            store = SqliteMetadataStore(tmp_path / "metadata.db")
            opened.append(store)
            return store

        yield open_sqlite
    else:
        from strom.server.zookeeper.client import connect, paths_of

        zookeeper: LocalZooKeeper = request.getfixturevalue("zookeeper")
        config = Configuration(
            {"zookeeper.address": zookeeper.address, "zookeeper.path.root": f"/store-test-{uuid.uuid4().hex}"}
        )

        def open_zookeeper() -> MetadataStore:
            from strom.server.store.zookeeper import ZooKeeperMetadataStore

            store = ZooKeeperMetadataStore(connect(config), paths_of(config))
            opened.append(store)
            return store

        yield open_zookeeper
    for store in opened:
        store.close()


def table(table_id: int, name: str, database: str = "shop") -> TableRecord:
    return TableRecord(table_id, database, name, 1, b'{"bucket_count": 2}', 1000, 1000)


def test_the_metadata_store_contract(open_store: Opener) -> None:
    store = open_store()
    epoch = store.bump_coordinator_epoch()
    ids = [store.next_id("table") for _ in range(3)]
    assert ids == sorted(set(ids))

    store.create_database(DatabaseRecord("shop", b'{"comment": "c"}', 1000, 1000))
    assert store.get_database("shop") is not None and store.get_database("nope") is None
    # AlterDatabase: the descriptor and modified time change, the created time stays
    store.update_database(DatabaseRecord("shop", b'{"comment": "d"}', 5, 2000))
    store.update_database(DatabaseRecord("nope", b"{}", 5, 2000))  # a missing database: nothing
    assert store.get_database("nope") is None
    store.create_table(table(ids[0], "orders"), b'{"schema": 1}')
    store.create_table(table(ids[1], "items"), b'{"schema": 1}')
    store.add_schema(ids[0], 2, b'{"schema": 2}')
    store.create_partition(PartitionRecord(77, ids[1], "2026", 1000))
    store.put_buckets(
        [
            BucketAssignment(ids[0], None, 0, (0, 1), 0, 3, (0, 1), 5),
            BucketAssignment(ids[1], 77, 1, (1, 2, 3), 2, 1, (2,), 0, elr=(3, 1)),
        ]
    )
    store.put_document("kv-snapshots/1/0/0", b"a")
    store.put_document("kv-snapshots/1/0/1", b"b")
    store.put_document("acl/TABLE/shop.orders", b"c")

    with pytest.raises(RuntimeError), store.transaction():  # all or nothing
        store.create_table(table(ids[2], "half"), b"{}")
        store.put_document("kv-snapshots/9", b"x")
        raise RuntimeError("interrupted")

    reopened = open_store()
    for s in (store, reopened):
        assert [d.name for d in s.list_databases()] == ["shop"] or {d.name for d in s.list_databases()} >= {
            "shop"
        }
        assert sorted(t.name for t in s.list_tables("shop")) == ["items", "orders"]
        shop = s.get_database("shop")
        assert shop is not None and (shop.created_time, shop.modified_time) == (1000, 2000)
        assert json.loads(shop.database_json)["comment"] == "d"
        orders, items = s.get_table("shop", "orders"), s.get_table_by_id(ids[1])
        assert orders is not None and orders.table_id == ids[0]
        assert items is not None and items.name == "items"
        assert s.get_table("shop", "half") is None
        assert s.get_schema(ids[0], 2) == b'{"schema": 2}'
        by_name, by_id = s.get_partition(ids[1], "2026"), s.get_partition_by_id(77)
        assert by_name is not None and by_name.partition_id == 77
        assert by_id is not None and by_id.name == "2026"
        buckets = {b.key: b for b in s.list_buckets()}
        assert buckets[(ids[0], None, 0)].isr == (0, 1) and buckets[(ids[0], None, 0)].bucket_epoch == 5
        assert buckets[(ids[1], 77, 1)].leader == 2
        assert buckets[(ids[1], 77, 1)].elr == (3, 1) and buckets[(ids[0], None, 0)].elr == ()
        assert [k for k, _ in s.list_documents("kv-snapshots/1/")] == [
            "kv-snapshots/1/0/0",
            "kv-snapshots/1/0/1",
        ]
        assert s.get_document("kv-snapshots/9") is None
    assert reopened.next_id("table") > ids[-1]  # ids are never reused
    assert reopened.bump_coordinator_epoch() > epoch

    reopened.drop_partition(77)
    reopened.drop_table(ids[0])
    reopened.delete_documents("kv-snapshots/")
    assert reopened.get_table_by_id(ids[0]) is None and reopened.get_schema(ids[0], 2) is None
    assert reopened.list_buckets(ids[0]) == [] and reopened.get_partition_by_id(77) is None
    assert (
        reopened.list_documents("kv-snapshots/") == []
        and reopened.get_document("acl/TABLE/shop.orders") == b"c"
    )


def test_a_replaced_coordinator_cannot_write_to_zookeeper(zookeeper: LocalZooKeeper) -> None:
    from strom.server.store.zookeeper import ZooKeeperMetadataStore
    from strom.server.zookeeper.client import connect, paths_of

    config = Configuration(
        {"zookeeper.address": zookeeper.address, "zookeeper.path.root": f"/fence-test-{uuid.uuid4().hex}"}
    )
    fenced: list[bool] = []
    old = ZooKeeperMetadataStore(connect(config), paths_of(config), on_fenced=lambda: fenced.append(True))
    new = ZooKeeperMetadataStore(connect(config), paths_of(config))
    try:
        old.bump_coordinator_epoch()
        old.create_database(DatabaseRecord("before", b"{}", 1, 1))
        new.bump_coordinator_epoch()  # another coordinator took over
        with pytest.raises(NotCoordinatorLeaderError):
            old.create_database(DatabaseRecord("after", b"{}", 1, 1))
        assert fenced
        reread = ZooKeeperMetadataStore(connect(config), paths_of(config))
        try:
            assert {d.name for d in reread.list_databases()} >= {"before"}
            assert reread.get_database("after") is None
        finally:
            reread.close()
    finally:
        old.close()
        new.close()


def test_a_sqlite_store_from_before_eligible_leader_replicas_opens_with_empty_elrs(tmp_path: Path) -> None:
    import sqlite3

    from strom.server.store.sqlite import SqliteMetadataStore

    path = tmp_path / "metadata.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE buckets (table_id INTEGER NOT NULL, partition_id INTEGER NOT NULL, "
        "bucket_id INTEGER NOT NULL, replicas TEXT NOT NULL, leader INTEGER, leader_epoch INTEGER NOT NULL, "
        "isr TEXT NOT NULL, bucket_epoch INTEGER NOT NULL, PRIMARY KEY (table_id, partition_id, bucket_id))"
    )
    db.execute("INSERT INTO buckets VALUES (1, -1, 0, '[0, 1]', 0, 2, '[0]', 4)")
    db.commit()
    db.close()
    store = SqliteMetadataStore(path)
    try:
        (old,) = store.list_buckets()
        assert (old.isr, old.elr, old.bucket_epoch) == ((0,), (), 4)
        store.put_buckets([BucketAssignment(1, None, 0, (0, 1), None, 3, (), 5, elr=(1,))])
        assert store.list_buckets()[0].elr == (1,)
    finally:
        store.close()

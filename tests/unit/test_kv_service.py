"""KvService and KvManager in process (no servers): PutKv, Lookup, PrefixLookup and LimitScan
messages against a real ReplicaManager, and tablets rebuilt from snapshot + changelog."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from kv_table_maker import LOG_CONFIG, make_info

from strom.common.errors import InvalidRequiredAcksError
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.common.types import BIGINT, INT, STRING
from strom.record.compacted_row import CompactedRowEncoder
from strom.record.key_encoder import CompactedKeyEncoder
from strom.record.kv_batch import build_kv_batch
from strom.record.value_batch import parse_value_batch
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext, Session
from strom.server.tablet.kv.kv_manager import KvManager
from strom.server.tablet.kv.kv_tablet import KvTablet
from strom.server.tablet.kv.recovery import table_key_encoder
from strom.server.tablet.kv.snapshot import CompletedSnapshot
from strom.server.tablet.kv_service import KvService
from strom.server.tablet.log_service import LogService
from strom.server.tablet.replica_manager import Replica, ReplicaManager

SERVER = 1
TABLE_ID = 7
CTX = RequestContext(api_version=2, peer="test", session=Session("test"))


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def pk_info() -> TableInfo:
    schema = Schema(
        [Column("a", INT()), Column("b", STRING()), Column("v", BIGINT())], primary_key=["a", "b"]
    )
    return make_info(schema, {"table.kv.format-version": "2"}, bucket_keys=["a"])


class Server:
    """A tablet server's replica manager and KV handlers, without the network."""

    def __init__(self, data_dir: Path, remote: Path | None = None) -> None:
        self.replicas = ReplicaManager(SERVER, data_dir, lambda info: LOG_CONFIG)
        self.committed: list[tuple[CompletedSnapshot, int]] = []

        async def commit(snapshot: CompletedSnapshot, leader_epoch: int) -> None:
            self.committed.append((snapshot, leader_epoch))

        self.kv = KvManager(
            SERVER, remote_data_dir=None if remote is None else str(remote), commit_snapshot=commit
        )
        self.service = KvService(self.replicas, self.kv, LogService(self.replicas))

    def lead(self, info: TableInfo, bucket: int = 0, epoch: int = 0) -> Replica:
        return self.replicas.become_leader_or_follower(
            TableBucket(info.table_id, None, bucket),
            database="db",
            table="t",
            partition_name=None,
            table_info=info,
            leader=SERVER,
            leader_epoch=epoch,
            replicas=(SERVER,),
            isr=(SERVER,),
            bucket_epoch=0,
        )

    def stop(self, bucket: TableBucket) -> None:
        self.kv.drop(bucket)
        self.replicas.stop_replica(bucket, delete=False)

    def close(self) -> None:
        self.kv.close()
        self.replicas.close()


class Client:
    def __init__(self, info: TableInfo) -> None:
        self.info = info
        self.encode_row = CompactedRowEncoder(info.schema.row_type).encode
        self.key_encoder = table_key_encoder(info)

    def key(self, a: int, b: str) -> bytes:
        return self.key_encoder.encode([a, b])

    def value(self, row: tuple[Any, ...]) -> bytes:
        return self.info.schema_id.to_bytes(2, "little") + self.encode_row(row)

    def put(
        self,
        rows: list[tuple[Any, ...]],
        deletes: list[tuple[int, str]] = (),  # type: ignore[assignment]
        *,
        writer: int = -1,
        seq: int = -1,
        targets: list[int] | None = None,
        acks: int = -1,
        schema_id: int | None = None,
    ) -> pb.PutKvRequest:
        records: list[tuple[bytes, bytes | None]] = [
            (self.key_encoder.encode_key(r), self.encode_row(r)) for r in rows
        ]
        records += [(self.key(a, b), None) for a, b in deletes]
        batch = build_kv_batch(
            records,
            schema_id=self.info.schema_id if schema_id is None else schema_id,
            writer_id=writer,
            batch_sequence=seq,
        )
        request = pb.PutKvRequest(acks=acks, table_id=self.info.table_id, timeout_ms=30000)
        if targets:
            request.target_columns.extend(targets)
        request.buckets_req.add(bucket_id=0, records=batch)
        return request

    def lookup(self, *keys: tuple[int, str]) -> pb.LookupRequest:
        request = pb.LookupRequest(table_id=self.info.table_id)
        request.buckets_req.add(bucket_id=0, keys=[self.key(a, b) for a, b in keys])
        return request


def test_put_lookup_prefix_and_limit_scan(tmp_path: Path) -> None:
    info = pk_info()
    server = Server(tmp_path / "data")
    client = Client(info)
    replica = server.lead(info)

    async def scenario() -> None:
        svc = server.service
        put = await svc.put_kv(client.put([(1, "x", 10), (1, "y", 11), (2, "x", 20)]), CTX)
        assert put.buckets_resp[0].log_end_offset == 3
        assert not put.buckets_resp[0].HasField("error_code")
        assert replica.log_tablet().high_watermark == 3  # one replica: committed at once

        got = await svc.lookup(client.lookup((1, "y"), (5, "q"), (2, "x")), CTX)
        values = got.buckets_resp[0].values
        assert len(values) == 3
        assert values[0].values == client.value((1, "y", 11))
        assert not values[1].HasField("values")  # not found
        assert values[2].values == client.value((2, "x", 20))

        prefix = pb.PrefixLookupRequest(table_id=TABLE_ID)
        bucket_key = CompactedKeyEncoder([INT()]).encode
        prefix.buckets_req.add(bucket_id=0, keys=[bucket_key([1]), bucket_key([3])])
        found = (await svc.prefix_lookup(prefix, CTX)).buckets_resp[0]
        assert [sorted(v.values) for v in found.value_lists] == [
            sorted([client.value((1, "x", 10)), client.value((1, "y", 11))]),
            [],
        ]

        scan = await svc.limit_scan(pb.LimitScanRequest(table_id=TABLE_ID, bucket_id=0, limit=2), CTX)
        assert not scan.HasField("error_code") and scan.is_log_table is False
        assert len(parse_value_batch(scan.records)) == 2

        # updates and deletes; the changelog is readable as a log
        put = await svc.put_kv(client.put([(1, "x", 99)], [(2, "x")]), CTX)
        assert put.buckets_resp[0].log_end_offset == 6  # -U, +U, -D
        got = await svc.lookup(client.lookup((1, "x"), (2, "x")), CTX)
        assert got.buckets_resp[0].values[0].values == client.value((1, "x", 99))
        assert not got.buckets_resp[0].values[1].HasField("values")

    run(scenario())
    server.close()


def test_small_tablets_live_in_memory_until_their_database_is_needed(tmp_path: Path) -> None:
    """A new bucket's tablet takes writes with no RocksDB database; past the server's pending budget
    a request waits for the database, which then holds every row; reopened from its short changelog,
    the tablet is back in memory with the same rows."""
    info = pk_info()
    server = Server(tmp_path / "data")
    server.kv = KvManager(SERVER, pending_budget_bytes=4000)
    server.service = KvService(server.replicas, server.kv, LogService(server.replicas))
    client = Client(info)
    replica = server.lead(info)
    bucket = replica.bucket
    kv_dir = replica.directory / "kv"
    rows = [(i, "k", i * 10) for i in range(40)]  # about 140 bytes each as the budget counts them

    async def lookup_all() -> list[bytes]:
        got = await server.service.lookup(client.lookup(*[(a, b) for a, b, _ in rows]), CTX)
        return [v.values for v in got.buckets_resp[0].values]

    async def scenario() -> None:
        await server.service.put_kv(client.put(rows[:10]), CTX)
        tablet = server.kv.tablet(bucket)
        assert tablet is not None and tablet.is_pending and not kv_dir.exists()
        await server.service.put_kv(client.put(rows[10:]), CTX)  # passes the budget
        assert server.kv.tablet(bucket) is tablet and tablet.is_pending
        await lookup_all()  # the next request waits for the database
        assert not tablet.is_pending and (kv_dir / "db").is_dir()
        assert tablet.pending_bytes() == 0 and server.kv._pending_budget.used == 0
        assert await lookup_all() == [client.value(r) for r in rows]
        server.kv.drop(bucket)
        await server.kv.wait_closed()
        assert await lookup_all() == [client.value(r) for r in rows]  # replayed into memory
        reopened = server.kv.tablet(bucket)
        assert reopened is not None and reopened is not tablet and reopened.is_pending

    run(scenario())
    server.close()


def test_put_errors_are_per_bucket_and_change_nothing(tmp_path: Path) -> None:
    info = pk_info()
    server = Server(tmp_path / "data")
    client = Client(info)
    replica = server.lead(info)

    async def scenario() -> None:
        svc = server.service
        with pytest.raises(InvalidRequiredAcksError):
            await svc.put_kv(client.put([(1, "x", 1)], acks=2), CTX)
        bad_schema = (await svc.put_kv(client.put([(1, "x", 1)], schema_id=3), CTX)).buckets_resp[0]
        assert bad_schema.error_code == 9 and "schema id 3" in bad_schema.error_message
        bad_targets = (await svc.put_kv(client.put([(1, "x", None)], targets=[2]), CTX)).buckets_resp[0]
        assert bad_targets.error_code == 35 and "['a', 'b']" in bad_targets.error_message
        other_bucket = client.put([(1, "x", 1)])
        other_bucket.buckets_req[0].bucket_id = 5
        assert (await svc.put_kv(other_bucket, CTX)).buckets_resp[0].error_code == 12  # not leader
        assert replica.log_tablet().log_end_offset == 0

        log_info = make_info(Schema([Column("x", INT())]))
        log_replica = server.lead(log_info, bucket=1)
        request = client.put([(1, "x", 1)])
        request.buckets_req[0].bucket_id = 1
        assert (await svc.put_kv(request, CTX)).buckets_resp[0].error_code == 20  # not a PK table
        lookup = client.lookup((1, "x"))
        lookup.buckets_req[0].bucket_id = 1
        assert (await svc.lookup(lookup, CTX)).buckets_resp[0].error_code == 20
        # LimitScan on a log table is served by the log service
        scan = await svc.limit_scan(pb.LimitScanRequest(table_id=TABLE_ID, bucket_id=1, limit=5), CTX)
        assert scan.is_log_table and not scan.HasField("error_code")
        assert log_replica.log_tablet().log_end_offset == 0

    run(scenario())
    server.close()


def test_idempotent_retry_through_the_service(tmp_path: Path) -> None:
    info = pk_info()
    server = Server(tmp_path / "data")
    client = Client(info)
    server.lead(info)

    async def scenario() -> None:
        svc = server.service
        first = client.put([(1, "x", 1)], writer=11, seq=0)
        assert (await svc.put_kv(first, CTX)).buckets_resp[0].log_end_offset == 1
        second = client.put([(1, "x", 2)], writer=11, seq=1)
        assert (await svc.put_kv(second, CTX)).buckets_resp[0].log_end_offset == 3
        retry = await svc.put_kv(second, CTX)
        assert retry.buckets_resp[0].log_end_offset == 3 and not retry.buckets_resp[0].HasField("error_code")
        got = await svc.lookup(client.lookup((1, "x")), CTX)
        assert got.buckets_resp[0].values[0].values == client.value((1, "x", 2))
        gap = await svc.put_kv(client.put([(1, "x", 3)], writer=11, seq=7), CTX)
        assert gap.buckets_resp[0].error_code == 31  # OUT_OF_ORDER_SEQUENCE

    run(scenario())
    server.close()


def test_tablet_is_rebuilt_from_snapshot_and_changelog(tmp_path: Path) -> None:
    info = pk_info()
    remote = tmp_path / "remote"
    server = Server(tmp_path / "data", remote)
    client = Client(info)
    bucket = TableBucket(TABLE_ID, None, 0)
    server.lead(info)
    keys = [(a, str(b)) for a in range(5) for b in range(20)]

    async def write_and_snapshot() -> list[bytes | None]:
        svc = server.service
        await svc.put_kv(client.put([(a, b, a * 100 + int(b)) for a, b in keys]), CTX)
        snapshot = await server.kv.snapshot(bucket)
        assert snapshot is not None and snapshot.log_offset == 100
        assert await server.kv.snapshot(bucket) is None  # nothing new to snapshot
        assert server.kv.min_retain_offset(bucket) == 100
        await svc.put_kv(client.put([(a, b, -1) for a, b in keys[::7]], keys[::5]), CTX)
        got = await svc.lookup(client.lookup(*keys), CTX)
        return [v.values if v.HasField("values") else None for v in got.buckets_resp[0].values]

    before = run(write_and_snapshot())
    assert server.committed and server.committed[0][1] == 0  # leader epoch passed to the commit hook
    assert any(v is None for v in before) and any(v is not None for v in before)
    server.stop(bucket)
    server.close()

    # a new server process: the tablet comes back from the snapshot plus the changelog after it
    restarted = Server(tmp_path / "data", remote)
    restarted.lead(info, epoch=1)

    async def read_back() -> list[bytes | None]:
        got = await restarted.service.lookup(client.lookup(*keys), CTX)
        tablet = restarted.kv.tablet(bucket)
        assert tablet is not None and tablet.flushed_offset == 100 + len(keys[::7]) * 2 + len(keys[::5])
        return [v.values if v.HasField("values") else None for v in got.buckets_resp[0].values]

    assert run(read_back()) == before
    restarted.close()


def test_new_leader_epoch_rebuilds_the_tablet(tmp_path: Path) -> None:
    info = pk_info()
    server = Server(tmp_path / "data")  # no remote storage: replay the whole changelog
    client = Client(info)
    bucket = TableBucket(TABLE_ID, None, 0)
    server.lead(info)

    async def scenario() -> None:
        svc = server.service
        await svc.put_kv(client.put([(1, "x", 1), (2, "y", 2)]), CTX)
        first = server.kv.tablet(bucket)
        server.lead(info, epoch=3)
        got = await svc.lookup(client.lookup((1, "x"), (2, "y")), CTX)
        second = server.kv.tablet(bucket)
        assert second is not None and second is not first
        assert [v.values for v in got.buckets_resp[0].values] == [
            client.value((1, "x", 1)),
            client.value((2, "y", 2)),
        ]
        # concurrent first uses share one opening
        server.lead(info, epoch=4)
        results = await asyncio.gather(*(svc.lookup(client.lookup((1, "x")), CTX) for _ in range(3)))
        assert all(r.buckets_resp[0].values[0].values == client.value((1, "x", 1)) for r in results)

    run(scenario())
    server.close()


def test_replicated_puts_commit_with_the_isr(tmp_path: Path) -> None:
    info = pk_info()
    server = Server(tmp_path / "data")
    client = Client(info)
    bucket = TableBucket(TABLE_ID, None, 0)
    replica = server.replicas.become_leader_or_follower(
        bucket,
        database="db",
        table="t",
        partition_name=None,
        table_info=info,
        leader=SERVER,
        leader_epoch=0,
        replicas=(SERVER, 2),
        isr=(SERVER, 2),
        bucket_epoch=0,
    )
    tablet = replica.log_tablet()

    async def found(a: int, b: str) -> bool:
        got = await server.service.lookup(client.lookup((a, b)), CTX)
        return got.buckets_resp[0].values[0].HasField("values")

    async def scenario() -> None:
        svc = server.service
        # acks=1: appended, but not committed until the follower has it: not visible yet
        put = await svc.put_kv(client.put([(1, "x", 1)], acks=1), CTX)
        assert put.buckets_resp[0].log_end_offset == 1 and tablet.high_watermark == 0
        assert not await found(1, "x")
        kv = server.kv.tablet(bucket)
        assert kv is not None and len(kv.buffer) == 1
        # the next put merges against the uncommitted row
        task = asyncio.create_task(svc.put_kv(client.put([(1, "x", 2)], acks=-1), CTX))
        await asyncio.sleep(0.05)
        assert not task.done()  # acks=all waits for the follower
        replica.record_follower_fetch(2, tablet.log_end_offset)
        put = await task
        assert put.buckets_resp[0].log_end_offset == 3 and not put.buckets_resp[0].HasField("error_code")
        assert tablet.high_watermark == 3 and kv.flushed_offset == 3
        got = await svc.lookup(client.lookup((1, "x")), CTX)
        assert got.buckets_resp[0].values[0].values == client.value((1, "x", 2))
        # the follower does not come: acks=all times out, nothing becomes visible
        slow = client.put([(2, "y", 1)], acks=-1)
        slow.timeout_ms = 50
        put = await svc.put_kv(slow, CTX)
        assert put.buckets_resp[0].error_code == 25 and not put.buckets_resp[0].HasField("log_end_offset")
        assert not await found(2, "y")
        # too few in-sync replicas for acks=all: refused before anything is appended
        server.service.min_in_sync_replicas = 3
        end = tablet.log_end_offset
        put = await svc.put_kv(client.put([(3, "z", 1)], acks=-1), CTX)
        assert put.buckets_resp[0].error_code == 29 and tablet.log_end_offset == end
        # the follower catches up later: the high watermark and the kv move together
        replica.record_follower_fetch(2, tablet.log_end_offset)
        server.kv.flush_to_high_watermark(replica, tablet.high_watermark)
        assert await found(2, "y")

    run(scenario())
    server.close()


def test_tablets_close_off_the_event_loop_and_reopen_after_their_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A close flushes the memtable (rocksdict always does): it must not stall the event loop, and a
    reopen of the same bucket must wait for it (RocksDB's lock on the directory)."""
    info = pk_info()
    server = Server(tmp_path / "data")
    client = Client(info)
    bucket = TableBucket(TABLE_ID, None, 0)
    server.lead(info)
    closed_on: list[str] = []
    close = KvTablet.close

    def recording_close(tablet: KvTablet) -> None:
        closed_on.append(threading.current_thread().name)
        close(tablet)

    monkeypatch.setattr(KvTablet, "close", recording_close)

    async def scenario() -> None:
        svc = server.service
        await svc.put_kv(client.put([(1, "x", 1), (2, "y", 2)]), CTX)
        await server.kv.wait_for_db(bucket)  # created in the background for a new bucket: close a real one
        server.kv.drop(bucket)  # as when the replica becomes a follower
        assert server.kv.tablet(bucket) is None
        # at once the next request opens it again: after the close, or RocksDB refuses the lock
        got = await svc.lookup(client.lookup((1, "x"), (2, "y")), CTX)
        assert [v.values for v in got.buckets_resp[0].values] == [
            client.value((1, "x", 1)),
            client.value((2, "y", 2)),
        ]
        await server.kv.wait_for_db(bucket)  # reopened in memory from its short changelog: a real one
        await server.kv.aclose()  # shutdown: the remaining tablet closes off the loop too
        assert server.kv.tablet(bucket) is None

    run(scenario())
    server.replicas.close()
    assert len(closed_on) == 2
    assert all(name.startswith("kv-close") for name in closed_on), closed_on

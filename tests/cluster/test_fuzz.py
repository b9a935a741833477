"""Untrusted input never corrupts, hijacks or exhausts a server.

A two-tablet-server cluster with Fluss's recommended listeners (clients on CLIENT, servers among
themselves on INTERNAL) takes, from client connections: the forged internal requests of the attack
report, a bounded seeded run of mutated requests for every API (see tests/fuzzer.py; set
STROM_FUZZ_SEED to replay one), and the memory attacks (unread pipelined answers, huge declared frames,
half-open connections). Afterwards every server is alive, a reference table reads back identical with
the official client, nothing exists outside the data directories, and memory stayed bounded.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from fuzzer import (
    REFERENCE,
    Findings,
    FuzzCluster,
    frame_batch,
    fuzz_target,
    read_reference,
    rss,
    run_round,
    seed_tables,
    table_ids,
)

from strom.common.errors import AuthorizationError, FlussError
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.framing import encode_request
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal

ROUNDS, FRAMES_PER_ROUND = 100, 60
MEMORY_BOUND = 200 << 20  # what any server may grow by during the whole module


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzCluster]:
    cluster = FuzzCluster(tmp_path_factory.mktemp("fuzz"))
    try:
        seed_tables(cluster)
        yield cluster
    finally:
        cluster.cluster.stop()


# ---- the attack report's forged internal requests


def test_forged_internal_requests_from_a_client_connection_change_nothing(fuzz_cluster: FuzzCluster) -> None:
    fc = fuzz_cluster
    (log_id,) = table_ids(fc, ("kept", "reference"))

    async def main() -> None:
        for host, port in fc.tablets:
            conn = await RpcConnection.connect(host, port)
            try:
                notify = pb.NotifyLeaderAndIsrRequest(coordinator_epoch=-5)
                entry = notify.notify_buckets_leader_req.add(
                    leader=0, leader_epoch=99, replicas=[0], isr=[0], bucket_epoch=0
                )
                entry.physical_table_path.database_name = "../../escape-forged"
                entry.physical_table_path.table_name = "x"
                entry.table_bucket.table_id, entry.table_bucket.bucket_id = log_id, 5
                stop = pb.StopReplicaRequest(coordinator_epoch=-5)
                stopped = stop.stop_replicas_req.add(leader_epoch=99, delete=True)
                stopped.table_bucket.table_id, stopped.table_bucket.bucket_id = log_id, 0
                for key, request in (
                    (ApiKey.NOTIFY_LEADER_AND_ISR, notify),
                    (ApiKey.STOP_REPLICA, stop),
                    (ApiKey.UPDATE_METADATA, pb.UpdateMetadataRequest(coordinator_epoch=-5)),
                ):
                    with pytest.raises(AuthorizationError, match="internal API"):
                        await conn.request(key, request)
            finally:
                conn.close()
        conn = await RpcConnection.connect(*fc.coordinator)
        try:
            for request in (
                internal.RegisterTabletServerRequest(),
                internal.RegisterTabletServerRequest(server_id=0, host="127.0.0.1", port=0),
                internal.RegisterTabletServerRequest(server_id=9, host="127.0.0.1", port=1),
            ):
                with pytest.raises(AuthorizationError, match="internal API"):
                    await conn.request_raw(ApiKey.REGISTER_TABLET_SERVER, request.SerializePartialToString())
        finally:
            conn.close()

    asyncio.run(main())
    assert read_reference(fc) == REFERENCE
    assert not list(fc.base.parent.rglob("escape-forged*"))


def test_registration_on_the_internal_listener_cannot_replace_a_live_server(
    fuzz_cluster: FuzzCluster,
) -> None:
    fc = fuzz_cluster
    coordinator = fc.cluster.coordinator

    async def main() -> None:
        conn = await RpcConnection.connect(coordinator.host, coordinator.port)  # internal listener
        try:
            for request, named in (
                (internal.RegisterTabletServerRequest(), "without server_id"),
                (internal.RegisterTabletServerRequest(server_id=0, host="127.0.0.1", port=4), "live"),
                (internal.RegisterTabletServerRequest(server_id=9, host="127.0.0.1", port=1), "cannot reach"),
            ):
                with pytest.raises(FlussError, match=named) as refused:
                    await conn.request_raw(ApiKey.REGISTER_TABLET_SERVER, request.SerializePartialToString())
                assert refused.value.code != -1
        finally:
            conn.close()

    asyncio.run(main())
    fc.cluster.wait_for_tablet_servers({0, 1}, timeout=10)  # both real servers still registered
    assert read_reference(fc) == REFERENCE


# ---- mutations of every API


def test_mutated_requests_for_every_api(fuzz_cluster: FuzzCluster) -> None:
    fc = fuzz_cluster
    seed = int(os.environ.get("STROM_FUZZ_SEED") or random.randrange(1 << 32))
    rng = random.Random(seed)
    target = fuzz_target(fc)
    total = Findings()

    async def main() -> None:
        next_id = 1
        for round_number in range(ROUNDS):
            host, port = (fc.coordinator, *fc.tablets)[round_number % 3]
            frames = frame_batch(rng, target, FRAMES_PER_ROUND, next_id, tablet=round_number % 3 != 0)
            next_id += FRAMES_PER_ROUND
            total.merge(await run_round(host, port, frames))

    asyncio.run(main())
    context = (
        f"seed {seed} (STROM_FUZZ_SEED={seed} replays it): {total.answered} answers, {total.errors_by_code}"
    )
    print(context)
    assert fc.all_alive(), context
    assert total.unknown_server_errors == [], context
    assert total.unanswered == [], context
    assert total.answered == ROUNDS * FRAMES_PER_ROUND, context
    assert read_reference(fc) == REFERENCE, context
    assert not list(fc.base.parent.rglob("escape-fuzz*")), context


# ---- memory attacks


def test_unread_pipelined_answers_and_huge_frames_stay_bounded(fuzz_cluster: FuzzCluster) -> None:
    fc = fuzz_cluster
    (log_id,) = table_ids(fc, ("kept", "reference"))  # mutations may have dropped the fuzz tables
    fetch = pb.FetchLogRequest(follower_server_id=-1, max_bytes=1 << 20, max_wait_ms=0)
    table = fetch.tables_req.add(table_id=log_id, projection_pushdown_enabled=False)
    table.buckets_req.add(bucket_id=0, fetch_offset=0, max_fetch_bytes=1 << 20)
    body = fetch.SerializeToString()
    pipelined = b"".join(encode_request(int(ApiKey.FETCH_LOG), 0, i, body) for i in range(5000))

    readers = []
    for host, port in fc.tablets:  # 5000 fetches whose answers are never read
        sock = socket.create_connection((host, port))
        sock.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 5
        while sent < len(pipelined) and time.monotonic() < deadline:
            try:
                sent += sock.send(pipelined[sent:])
            except BlockingIOError:
                time.sleep(0.01)  # the server stopped reading us: the point
        readers.append(sock)
    huge = []
    for _ in range(3):  # three connections each sending 120 MB of a declared 127 MB frame
        sock = socket.create_connection(fc.coordinator)
        sock.sendall(struct.pack(">ihhi", 127 << 20, int(ApiKey.CREATE_TABLE), 0, 1))
        chunk = b"\0" * (1 << 20)
        for _ in range(120):
            sock.sendall(chunk)
        huge.append(sock)
    half_open = [socket.create_connection(fc.coordinator) for _ in range(200)]
    for sock in half_open[:100]:
        sock.sendall(struct.pack(">i", 1000))  # a partial frame that never completes
    for sock in half_open[100:150]:  # large frames, received into buffers of their own, never complete
        sock.sendall(struct.pack(">ihhi", 1 << 20, int(ApiKey.CREATE_TABLE), 0, 1) + b"\0" * 100_000)
    time.sleep(6)  # past rpc.frame-timeout and netty.connection.max-idle-time
    try:
        for pid, before in fc.memory_before.items():
            assert rss(pid) - before < MEMORY_BOUND, f"server {pid} grew by {(rss(pid) - before) >> 20} MB"
        closed = 0
        for sock in half_open:
            sock.setblocking(False)
            try:
                closed += sock.recv(1) == b""
            except BlockingIOError:
                pass
            except ConnectionResetError:
                closed += 1
        assert closed == len(half_open), f"{len(half_open) - closed} idle connections are still open"
        for sock in huge:  # the oversized frames were refused on their header
            sock.settimeout(5)
            answer = sock.recv(1 << 16)
            assert answer[4] == 1 and b"exceeds the maximum frame size" in answer
    finally:
        for sock in readers + huge + half_open:
            sock.close()
    assert fc.all_alive()
    assert read_reference(fc) == REFERENCE

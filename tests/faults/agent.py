"""The bed's eyes inside the network: a process in the client namespace that answers the campaign's
questions about the cluster (is this port serving, which servers does the coordinator list, who leads
which bucket, which replicas are in its ISR, are the replicas in step), so that nothing in the root
namespace ever connects to a host.

Protocol: one JSON object per line on stdin ({"op": ..., args}), one JSON answer per line on stdout
({"ok": value} or {"error": message}). Run as `python -m tests.faults.agent`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from strom.common.errors import FlussError
from strom.rpc.api import ApiKey
from strom.rpc.client import RpcConnection
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.gen import strom_internal_pb2 as internal


def split(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


async def request(address: str, key: ApiKey, message: Any, timeout: float = 5) -> Any:
    host, port = split(address)
    connection = await RpcConnection.connect(host, port, connect_timeout=2)
    try:
        return await connection.request(key, message, timeout=timeout)
    finally:
        connection.close()


async def serving(address: str) -> bool:
    try:
        host, port = split(address)
        connection = await RpcConnection.connect(host, port, connect_timeout=2)
        connection.close()
        return True
    except (FlussError, OSError):
        return False


async def zk_ok(address: str) -> bool:
    host, port = split(address)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
        writer.write(b"ruok")
        answer = await asyncio.wait_for(reader.read(4), 2)
        writer.close()
        return answer == b"imok"
    except (OSError, TimeoutError):
        return False


async def first_answer(coordinators: list[str], key: ApiKey, message: Any) -> Any:
    errors = []
    for address in coordinators:
        try:
            return await request(address, key, message)
        except (FlussError, OSError, TimeoutError) as e:
            errors.append(f"{address}: {e}")
    raise RuntimeError("; ".join(errors))


async def listed(coordinators: list[str]) -> list[int]:
    response = await first_answer(coordinators, ApiKey.GET_METADATA, pb.MetadataRequest())
    return sorted(s.node_id for s in response.tablet_servers)


async def buckets(coordinators: list[str], tables: list[str]) -> dict[str, Any]:
    """table -> {"table_id", "buckets": {bucket: {"leader", "replicas", "epoch"}}}."""
    message = pb.MetadataRequest()
    for table in tables:
        message.table_path.add(database_name="fluss", table_name=table)
    response = await first_answer(coordinators, ApiKey.GET_METADATA, message)
    result = {}
    for meta in response.table_metadata:
        result[meta.table_path.table_name] = {
            "table_id": meta.table_id,
            "buckets": {
                str(b.bucket_id): {
                    "leader": b.leader_id if b.HasField("leader_id") else None,
                    "replicas": list(b.replica_id),
                    "epoch": b.leader_epoch,
                }
                for b in meta.bucket_metadata
            },
        }
    return result


async def isr(coordinators: list[str]) -> dict[str, list[int]]:
    """The ISR the active coordinator holds for each bucket, keyed "table_id/bucket" (buckets of
    partitioned tables left out). A leader's ISR change takes effect only once the coordinator accepted
    it (AdjustIsr), so this is the ISR that acks=all writes wait for."""
    response = await first_answer(coordinators, ApiKey.DESCRIBE_CLUSTER, internal.DescribeClusterRequest())
    unpartitioned = [b for b in response.buckets if not b.HasField("partition_id")]
    return {f"{b.table_id}/{b.bucket_id}": sorted(b.isr) for b in unpartitioned}


async def replicas(tablet_servers: list[str]) -> dict[str, Any]:
    """server address -> its replicas (table id, bucket, leader, log end, high watermark), or an error."""

    async def one(address: str) -> Any:
        try:
            response = await request(address, ApiKey.DESCRIBE_REPLICAS, internal.DescribeReplicasRequest())
        except (FlussError, OSError, TimeoutError) as e:
            return {"error": str(e)}
        return {
            "server_id": response.server_id,
            "replicas": [
                {
                    "table_id": r.table_id,
                    "bucket": r.bucket_id,
                    "leader": r.leader,
                    "log_end": r.log_end_offset,
                    "high_watermark": r.high_watermark,
                }
                for r in response.replicas
            ],
        }

    answers = await asyncio.gather(*(one(a) for a in tablet_servers))
    return dict(zip(tablet_servers, answers, strict=True))


async def handle(command: dict[str, Any]) -> Any:
    op = command.pop("op")
    if op == "serving":
        return await serving(command["address"])
    if op == "zk_ok":
        return await zk_ok(command["address"])
    if op == "listed":
        return await listed(command["coordinators"])
    if op == "buckets":
        return await buckets(command["coordinators"], command["tables"])
    if op == "replicas":
        return await replicas(command["tablet_servers"])
    if op == "isr":
        return await isr(command["coordinators"])
    raise ValueError(f"unknown op {op!r}")


async def main() -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        try:
            answer: dict[str, Any] = {"ok": await asyncio.wait_for(handle(json.loads(line)), 20)}
        except Exception as e:  # every question gets an answer; the campaign decides what it means
            answer = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())

"""Producer offsets (Fluss 1.0, API keys 1053-1055): the per-bucket log offsets an exactly-once writer
registers before it writes, so that after a failure it can tell which of its appends already landed.

A producer (a Spark or Flink job, by a name of its choosing) registers once: RegisterProducerOffsets
creates the entry and answers CREATED (0), or leaves an unexpired existing entry alone and answers
ALREADY_EXISTS (1), the "check and register" a restarted job relies on. An expired entry is replaced.
GetProducerOffsets answers an empty response for an unknown producer, as Fluss does. Entries expire
after the request's `ttl_ms` or `coordinator.producer-offsets.ttl` (24 h), and a supervised loop
removes expired ones every `coordinator.producer-offsets.cleanup-interval`.

Fluss keeps the offsets in a file under `remote.data.dir` and a pointer in ZooKeeper; Strom keeps the
whole entry as one metadata-store document (it is small: one offset per bucket).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import InvalidProducerIdError
from strom.common.table_path import detect_invalid_name
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.store.base import MetadataStore
from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

_PREFIX = "producer-offsets/"
CREATED = 0
ALREADY_EXISTS = 1


def _key(producer_id: str) -> str:
    # the trailing '/' makes the key's prefix unique: deleting "a/" never touches "ab/"
    return f"{_PREFIX}{producer_id}/"


def _check_id(producer_id: str) -> None:
    reason = detect_invalid_name(producer_id)
    if reason is not None:
        raise InvalidProducerIdError(f"Invalid producer ID '{producer_id}': {reason}")


class ProducerOffsetsService:
    def __init__(self, store: OrderedStore, config: Configuration) -> None:
        self.store = store
        self.default_ttl_ms = int(config.get(options.COORDINATOR_PRODUCER_OFFSETS_TTL).total_seconds() * 1000)
        self.cleanup_interval = config.get(
            options.COORDINATOR_PRODUCER_OFFSETS_CLEANUP_INTERVAL
        ).total_seconds()

    def _entry(self, producer_id: str) -> dict[str, Any] | None:
        raw = self.store.get_document(_key(producer_id))
        return None if raw is None else dict(json.loads(raw))

    async def register(
        self, request: pb.RegisterProducerOffsetsRequest, ctx: object
    ) -> pb.RegisterProducerOffsetsResponse:
        producer_id = request.producer_id
        _check_id(producer_id)
        ttl_ms = request.ttl_ms if request.HasField("ttl_ms") else self.default_ttl_ms
        offsets = [
            [
                t.table_id,
                b.partition_id if b.HasField("partition_id") else None,
                b.bucket_id,
                b.log_end_offset,
            ]
            for t in request.table_offsets
            for b in t.bucket_offsets
        ]

        def check_and_register(store: MetadataStore) -> int:
            now = int(time.time() * 1000)
            existing = store.get_document(_key(producer_id))
            if existing is not None and json.loads(existing)["expiration_time"] > now:
                return ALREADY_EXISTS
            entry = {"expiration_time": now + ttl_ms, "offsets": offsets}
            store.put_document(_key(producer_id), json.dumps(entry).encode())
            return CREATED

        result = await self.store.atomically(check_and_register)
        log.info(
            "producer %s: offsets of %d buckets %s",
            producer_id,
            len(offsets),
            "registered" if result == CREATED else "already registered, kept",
        )
        return pb.RegisterProducerOffsetsResponse(result=result)

    async def get(self, request: pb.GetProducerOffsetsRequest, ctx: object) -> pb.GetProducerOffsetsResponse:
        _check_id(request.producer_id)
        entry = self._entry(request.producer_id)
        response = pb.GetProducerOffsetsResponse()
        if entry is None:
            return response
        response.producer_id = request.producer_id
        response.expiration_time = entry["expiration_time"]
        by_table: dict[int, pb.PbProducerTableOffsets] = {}
        for table_id, partition_id, bucket_id, offset in entry["offsets"]:
            table = by_table.get(table_id)
            if table is None:
                table = by_table[table_id] = response.table_offsets.add(table_id=table_id)
            bucket = table.bucket_offsets.add(bucket_id=bucket_id)
            if partition_id is not None:
                bucket.partition_id = partition_id
            if offset is not None:
                bucket.log_end_offset = offset
        return response

    async def delete(
        self, request: pb.DeleteProducerOffsetsRequest, ctx: object
    ) -> pb.DeleteProducerOffsetsResponse:
        _check_id(request.producer_id)
        await self.store.delete_documents(_key(request.producer_id))
        log.info("producer %s: offsets deleted", request.producer_id)
        return pb.DeleteProducerOffsetsResponse()

    def table_ids(self, producer_id: str) -> set[int]:
        """The tables a producer's registered offsets name (for access checks)."""
        entry = self._entry(producer_id) if detect_invalid_name(producer_id) is None else None
        return set() if entry is None else {int(o[0]) for o in entry["offsets"]}

    async def remove_expired(self) -> int:
        def remove(store: MetadataStore) -> int:
            now = int(time.time() * 1000)
            removed = 0
            for key, value in store.list_documents(_PREFIX):
                if json.loads(value)["expiration_time"] <= now:
                    store.delete_documents(key)
                    removed += 1
            return removed

        return await self.store.atomically(remove)

    async def cleanup_loop(self) -> None:
        """Supervised by the active coordinator; an error propagates to the supervisor."""
        while True:
            await asyncio.sleep(self.cleanup_interval)
            removed = await self.remove_expired()
            if removed:
                log.info("removed %d expired producer offsets", removed)

"""The coordinator's Fluss 1.0 services against a real metadata store: producer offsets expire and are
removed by the cleanup; dynamic configs apply live values and refuse everything else."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import ConfigError
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.coordinator.producer_offsets import ProducerOffsetsService
from strom.server.dynamic_config import DYNAMIC, INITIAL, REDACTED, DynamicConfig, altered
from strom.server.store.ordered import OrderedStore
from strom.server.store.sqlite import SqliteMetadataStore


def test_expired_producer_offsets_are_removed(tmp_path: Path) -> None:
    async def main() -> None:
        store = OrderedStore(SqliteMetadataStore(tmp_path / "metadata.db"))
        service = ProducerOffsetsService(store, Configuration())
        for producer, ttl in (("short", 1), ("long", 60_000)):
            request = pb.RegisterProducerOffsetsRequest(producer_id=producer, ttl_ms=ttl)
            request.table_offsets.add(table_id=1).bucket_offsets.add(bucket_id=0, log_end_offset=5)
            assert (await service.register(request, None)).result == 0
        await asyncio.sleep(0.01)
        assert await service.remove_expired() == 1
        assert not (await service.get(pb.GetProducerOffsetsRequest(producer_id="short"), None)).HasField(
            "producer_id"
        )
        kept = await service.get(pb.GetProducerOffsetsRequest(producer_id="long"), None)
        assert [(t.table_id, [b.log_end_offset for b in t.bucket_offsets]) for t in kept.table_offsets] == [
            (1, [5])
        ]
        await store.close()

    asyncio.run(main())


def test_dynamic_config_applies_live_options_and_refuses_the_rest() -> None:
    key = options.LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER.key
    config = DynamicConfig(Configuration({key: "1", "security.sasl.plain.jaas.config": "user_admin=secret"}))
    seen: list[object] = []
    config.on_change(options.LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER, seen.append)
    config.on_change(options.KV_SNAPSHOT_INTERVAL, seen.append)
    values = altered({}, [(key, "2", 0), ("kv.snapshot.interval", "30s", 0)])
    assert config.update(values) == [key, "kv.snapshot.interval"]
    assert seen == [2, timedelta(seconds=30)]
    assert config.update(values) == []  # nothing changed: nothing applied again
    described = {k: (v, source) for k, v, source in config.describe()}
    assert described[key] == ("2", DYNAMIC)
    assert described["security.sasl.plain.jaas.config"] == (REDACTED, INITIAL)
    assert config.update(altered(values, [(key, None, 1)])) == [key]  # deleted: back to the initial 1
    assert seen[-1] == 1
    for change, message in (
        (("bind.listeners", "X://h:1", 0), "not allowed to be changed dynamically"),
        (("datalake.format", "paimon", 0), "cannot apply it on live servers"),
        ((key, "0", 0), "at least 1"),
        ((key, "x", 0), "Cannot parse"),
        ((key, "2", 2), "APPEND/SUBTRACT"),
        ((key, "2", 9), "Unsupported config operation type 9"),
        # the disk-full ratios are checked as a pair against each other (the other at its default)
        (("server.data-disk.write-recover-ratio", "0.9", 0), "0 < recover < limit <= 1"),
        (("server.data-disk.write-limit-ratio", "1.5", 0), "0 < recover < limit <= 1"),
    ):
        with pytest.raises(ConfigError, match=message):
            altered({}, [change])
    lowered: list[tuple[str, str | None, int]] = [
        ("server.data-disk.write-recover-ratio", "0.6", 0),
        ("server.data-disk.write-limit-ratio", "0.7", 0),
    ]
    assert altered({}, lowered)["server.data-disk.write-limit-ratio"] == "0.7"

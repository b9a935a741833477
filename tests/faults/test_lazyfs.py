"""The power-cut file system (tests/faults/lazyfs.py): real FUSE mounts, real files, real cuts."""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fluss
import pyarrow as pa
import pytest
from harness import Cluster, run_pyfluss

from faults.lazyfs import LazyMount, LazyMountError, is_mounted, requires_fuse

pytestmark = requires_fuse()


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[LazyMount]:
    with LazyMount(tmp_path / "backing", tmp_path / "mnt") as m:
        yield m
    assert not is_mounted(tmp_path / "mnt")


def write(path: Path, data: bytes, *, sync: bool = False, append: bool = False) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_plain_file_operations_pass_through(mount: LazyMount) -> None:
    root = mount.mountpoint
    (root / "d" / "e").mkdir(parents=True)
    write(root / "d" / "f", b"hello")
    write(root / "d" / "f", b" world", append=True)
    assert (root / "d" / "f").read_bytes() == b"hello world"
    assert (root / "d" / "f").stat().st_size == 11
    fd = os.open(root / "d" / "f", os.O_RDWR)
    try:
        os.pwrite(fd, b"J", 6)
        assert os.pread(fd, 5, 6) == b"Jorld"
        os.ftruncate(fd, 5)
    finally:
        os.close(fd)
    assert (root / "d" / "f").read_bytes() == b"hello"
    os.rename(root / "d" / "f", root / "d" / "e" / "g")
    os.symlink("e/g", root / "d" / "link")
    assert (root / "d" / "link").read_bytes() == b"hello"
    assert sorted(os.listdir(root / "d")) == ["e", "link"]
    # a file unlinked while open stays readable through its descriptor
    fd = os.open(root / "d" / "e" / "g", os.O_RDONLY)
    os.unlink(root / "d" / "e" / "g")
    assert os.pread(fd, 5, 0) == b"hello"
    os.close(fd)
    (root / "d" / "link").unlink()
    (root / "d" / "e").rmdir()
    assert os.listdir(root) == ["d"]  # the daemon's graveyard stays hidden
    with pytest.raises(OSError) as refused:
        os.open(root / "d" / "direct", os.O_WRONLY | os.O_CREAT | os.O_DIRECT)  # not modelled: refused
    assert refused.value.errno == errno.EINVAL
    assert (mount.backing / "d").is_dir()  # everything is in the backing directory at once


def test_power_cut_keeps_synced_data_and_drops_the_rest(mount: LazyMount) -> None:
    root = mount.mountpoint
    (root / "d").mkdir()
    write(root / "d" / "log", b"durable|", sync=True)  # commits d and log's entry too
    write(root / "d" / "log", b"lost|", append=True)
    fd = os.open(root / "d" / "log", os.O_WRONLY)
    os.pwrite(fd, b"XX", 0)  # an unsynced overwrite of durable bytes
    os.close(fd)
    write(root / "d" / "never-synced", b"gone")
    # before the cut, reads see everything (the page cache)
    assert (root / "d" / "log").read_bytes() == b"XXrable|lost|"
    assert (root / "d" / "never-synced").read_bytes() == b"gone"

    mount.power_cut()

    assert (root / "d" / "log").read_bytes() == b"durable|"
    assert not (root / "d" / "never-synced").exists()  # created after the last commit: no entry
    assert mount.last_cut["reverted_files"] == 2
    # the mount works again, and a second cut keeps what was synced in between
    write(root / "d" / "log", b"again|", append=True, sync=True)
    write(root / "d" / "log", b"lost again", append=True)
    mount.power_cut()
    assert (root / "d" / "log").read_bytes() == b"durable|again|"


def test_power_cut_takes_back_uncommitted_namespace_changes(mount: LazyMount) -> None:
    root = mount.mountpoint
    write(root / "target", b"old", sync=True)
    write(root / "victim", b"v", sync=True)
    write(root / "tmp", b"new", sync=True)  # data and name durable; the rename below is not
    os.replace(root / "tmp", root / "target")
    os.unlink(root / "victim")
    (root / "newdir").mkdir()
    write(root / "newdir" / "x", b"x")
    assert sorted(os.listdir(root)) == ["newdir", "target"]

    mount.power_cut()

    assert sorted(os.listdir(root)) == ["target", "tmp", "victim"]
    assert (root / "target").read_bytes() == b"old"
    assert (root / "tmp").read_bytes() == b"new"
    assert (root / "victim").read_bytes() == b"v"

    # the same rename followed by an fsync of the directory survives
    os.replace(root / "tmp", root / "target")
    fsync_path(root)
    mount.power_cut()
    assert sorted(os.listdir(root)) == ["target", "victim"]
    assert (root / "target").read_bytes() == b"new"


def test_committed_create_without_synced_data_comes_back_empty(mount: LazyMount) -> None:
    root = mount.mountpoint
    write(root / "a", b"never fsynced")
    write(root / "b", b"b", sync=True)  # any fsync commits the journal: a's entry becomes durable
    mount.power_cut()
    assert (root / "a").read_bytes() == b""
    assert (root / "b").read_bytes() == b"b"


def test_truncate_reverts_unless_a_journal_commit_follows(mount: LazyMount) -> None:
    root = mount.mountpoint
    write(root / "seg", b"0123456789", sync=True)
    os.truncate(root / "seg", 4)
    mount.power_cut()
    assert (root / "seg").read_bytes() == b"0123456789"

    os.truncate(root / "seg", 4)
    write(root / "seg", b"abc", append=True)  # data after the cut point: not synced
    write(root / "other", b"o", sync=True)  # commits the truncate's size, not seg's data
    mount.power_cut()
    assert (root / "seg").read_bytes() == b"0123"


def test_torn_power_cut_keeps_a_seeded_prefix_of_the_unsynced_growth(mount: LazyMount) -> None:
    root = mount.mountpoint
    kept: dict[int, bytes] = {}
    for seed in range(4):
        write(root / "log", b"durable|", sync=True)
        write(root / "log", bytes(range(200)), append=True)
        mount.power_cut(torn_seed=seed)
        content = (root / "log").read_bytes()
        assert content == (b"durable|" + bytes(range(200)))[: len(content)]
        assert len(content) >= len(b"durable|")
        kept[seed] = content
    assert len({len(c) for c in kept.values()}) > 1, "the cut point must depend on the seed"
    # the same history and seed cut at the same byte: a campaign can replay it
    write(root / "log", b"durable|", sync=True)
    write(root / "log", bytes(range(200)), append=True)
    mount.power_cut(torn_seed=2)
    assert (root / "log").read_bytes() == kept[2]


def test_stop_cleans_up_after_the_daemon_died(tmp_path: Path) -> None:
    m = LazyMount(tmp_path / "backing", tmp_path / "mnt")
    m.start()
    try:
        write(m.mountpoint / "f", b"data")
        assert m._process is not None
        os.kill(m._process.pid, signal.SIGKILL)
        m._process.wait(10)
        with pytest.raises(OSError):
            os.listdir(m.mountpoint)  # a dead FUSE mount: the connection was aborted
        with pytest.raises(LazyMountError):
            m.power_cut()
    finally:
        m.stop()
    assert not is_mounted(m.mountpoint)
    assert (m.backing / "f").read_bytes() == b"data"
    assert not (m.backing / ".lazyfs-graveyard").exists()
    m.stop()  # idempotent


SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string())])


def _batch(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "payload": [f"row-{i}-" + "x" * 100 for i in ids]})


def _append_batches(cluster: Cluster, path: Any, batches: int, rows: int) -> list[int]:
    """Appends `batches` acknowledged batches (acks=all, one flush each) to a new 1-bucket table."""

    async def body(connection: Any) -> list[int]:
        admin = connection.get_admin()
        descriptor = fluss.TableDescriptor(
            fluss.Schema(SCHEMA), bucket_count=1, properties={"table.replication.factor": "1"}
        )
        await admin.create_table(path, descriptor)
        table = await connection.get_table(path)
        writer = table.new_append().create_writer()
        acked: list[int] = []
        for b in range(batches):
            writer.write_arrow(_batch(b * rows, rows))
            await writer.flush()  # acknowledged once this returns
            acked.extend(range(b * rows, (b + 1) * rows))
        return acked

    result: list[int] = run_pyfluss(cluster.bootstrap, body)
    return result


def _upsert_rounds(cluster: Cluster, path: Any, rounds: int, keys: int) -> None:
    """Upserts every key once per round, each round acknowledged (acks=all) before the next."""

    async def body(connection: Any) -> None:
        schema = fluss.Schema(pa.schema([("id", pa.int64()), ("v", pa.string())]), primary_keys=["id"])
        await connection.get_admin().create_table(path, fluss.TableDescriptor(schema, bucket_count=1))
        writer = (await connection.get_table(path)).new_upsert().create_writer()
        for r in range(rounds):
            for k in range(keys):
                writer.upsert({"id": k, "v": f"round-{r}-{k}"})
            await writer.flush()

    run_pyfluss(cluster.bootstrap, body)


def _lookup(cluster: Cluster, path: Any, keys: range) -> list[str | None]:
    async def body(connection: Any) -> list[str | None]:
        lookuper = (await connection.get_table(path)).new_lookup().create_lookuper()
        rows = [await lookuper.lookup({"id": k}) for k in keys]
        return [None if row is None else row["v"] for row in rows]

    result: list[str | None] = run_pyfluss(cluster.bootstrap, body)
    return result


def _read_ids(cluster: Cluster, path: Any) -> list[int]:
    async def body(connection: Any) -> list[int]:
        table = await connection.get_table(path)
        scanner = await table.new_scan().create_record_batch_log_scanner()
        scanner.subscribe_buckets({0: fluss.EARLIEST_OFFSET})
        ids: list[int] = (await scanner.to_arrow()).column("id").to_pylist()
        return ids

    # A restarted server is listed before it is elected (an unclean restart waits for the coordinator's
    # last-resort election) and before its leadership reaches it; pyfluss's to_arrow retries neither
    # "no leader" nor NOT_LEADER_OR_FOLLOWER (12): read again until the election is there (bounded).
    deadline = time.monotonic() + 30
    while True:
        try:
            result: list[int] = run_pyfluss(cluster.bootstrap, body)
            return result
        except fluss.FlussError as e:
            leaderless = "is not the leader" in str(e) or "No leader found" in str(e)
            if not leaderless or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_tablet_server_power_cut_loses_only_what_it_never_fsynced(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """A real tablet server with its data directory on the mount: pyfluss appends (acks=all), SIGKILL,
    power cut, restart. Without `log.flush.interval-messages` nothing fsyncs the appends, so with one
    replica acknowledged records may be lost, but what comes back is a prefix, readable and in order,
    also when the cut tears a batch (recovery cuts the torn tail); with it set to 1 every acknowledged
    record survives, and so does every acknowledged upsert of a primary-key table (RocksDB)."""
    cluster = Cluster(tmp_path / "cluster", tablet_servers=1)
    server = cluster.tablet_servers[0]
    mount = LazyMount(tmp_path / "disk", server.data_dir)
    mount.start()
    try:
        cluster.start()
        unsynced = fluss.TablePath("fluss", "appends_never_fsynced")
        acked = _append_batches(cluster, unsynced, batches=5, rows=200)
        server.kill()
        mount.power_cut()
        cluster.start_tablet_server(0)
        survived = _read_ids(cluster, unsynced)
        assert survived == acked[: len(survived)], "recovery must leave a prefix of the log"
        record_property("survived_without_fsync", f"{len(survived)}/{len(acked)}")
        print(f"without fsync: {len(survived)} of {len(acked)} acknowledged records survived the cut")

        torn = fluss.TablePath("fluss", "appends_torn")
        acked = _append_batches(cluster, torn, batches=5, rows=200)
        server.kill()
        mount.power_cut(torn_seed=7)
        server.config = {**server.config, "log.flush.interval-messages": "1"}
        cluster.start_tablet_server(0)
        survived_torn = _read_ids(cluster, torn)
        assert survived_torn == acked[: len(survived_torn)]
        assert 0 < len(survived_torn) < len(acked), "seed 7 keeps part of the log, torn mid-batch"
        assert "recovery cut" in (cluster.base_dir / "logs" / "tablet-server-0.log").read_text()
        record_property("survived_torn", f"{len(survived_torn)}/{len(acked)}")
        print(f"torn cut: {len(survived_torn)} of {len(acked)} acknowledged records survived")

        synced = fluss.TablePath("fluss", "appends_fsynced")
        acked = _append_batches(cluster, synced, batches=5, rows=200)
        keyed = fluss.TablePath("fluss", "upserts_fsynced")  # RocksDB on the mount too
        _upsert_rounds(cluster, keyed, rounds=3, keys=100)
        server.kill()
        mount.power_cut()
        cluster.start_tablet_server(0)
        assert _read_ids(cluster, synced) == acked
        assert _read_ids(cluster, unsynced) == survived
        assert _read_ids(cluster, torn) == survived_torn
        assert _lookup(cluster, keyed, range(0, 100, 9)) == [f"round-2-{k}" for k in range(0, 100, 9)]
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()
        mount.stop()

"""The power-cut file system (tests/faults/lazyfs.py): real FUSE mounts, real files, real cuts."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from faults.lazyfs import LazyMount, LazyMountError, fuse_available, is_mounted

pytestmark = pytest.mark.skipif(fuse_available() is not None, reason=str(fuse_available()))


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

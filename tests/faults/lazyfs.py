"""A power-cut file system for fault tests, in the spirit of Jepsen's LazyFS: a FUSE mount whose
`power_cut()` drops every write that was not made durable.

    with LazyMount(backing, mountpoint) as mount:   # start(): mounted when it returns
        ... a server writes under mountpoint; the test SIGKILLs it ...
        mount.power_cut()                           # the mount is usable again for a restart
    # stop(): unmounted, also after failures

The FUSE daemon (tests/faults/lazyfs_fuse.py, on the mfusepy binding over Debian's libfuse3) is a
process of its own, so a hang cannot freeze the test runner; every wait on it is bounded. All
operations pass straight through to the backing directory, so reads see data that was never synced,
as they would from the page cache. The daemon keeps what it needs to get back to the durable state.

What survives a power cut: the model is ext4 with data=ordered (and delayed allocation) in its
worst case, a cut just before any background write-back or periodic journal commit would have run:

- File data and size: durable only once the file is fsync'ed or fdatasync'ed (through any of its
  descriptors). A file written since reverts to its last durable content and size: appended bytes
  disappear, overwritten bytes come back. No torn or zero-filled tail is invented: a file's unsynced
  writes are lost as a whole (ext4 may also keep some of them; this is the harshest outcome).
- Namespace: create, mkdir, unlink, rmdir, rename, link and symlink are journaled metadata. Ext4
  commits its whole running transaction on any fsync, so an fsync or fdatasync of any file, or an
  fsync of any directory, on the mount makes every earlier namespace change durable, in order. A
  power cut takes back, newest first, every change made since the last such commit: a file created
  and not followed by any fsync disappears (with its directory entry), an unlinked file comes back
  with its durable content, a rename is undone (the replaced file returns). A file whose creation
  was committed but whose data was never fsynced comes back empty: ext4's zero-length files.
- Torn tails, on request: `power_cut(torn_seed=N)` keeps, of each file that grew since its last
  fsync, a seeded random prefix of that growth, cut at any byte: write-back of an append had begun
  (ext4's data=ordered still never shows bytes that were not written). Recovery must cut such a tail.
- Truncate: the cut bytes are saved as for an overwrite, so an unsynced truncate reverts; but a
  truncate to a smaller size is journaled metadata too, so a later journal commit makes the smaller
  size durable (with the bytes below it as they last were durable).
- Not modelled (applied at once and never taken back): chmod, chown, utimens; ext4's
  auto_da_alloc (which makes a rename over a file flush the new file's data first: here that data
  is lost unless it was fsynced, which is harsher); fdatasync that skips the journal commit (here
  fdatasync commits like fsync, which is kinder to other files' renames). Not supported: mmap
  writes through MAP_SHARED are written back by the kernel and count as ordinary writes; O_DIRECT,
  RENAME_EXCHANGE and RENAME_NOREPLACE are refused (EINVAL); fallocate and xattrs are not offered.
  What Strom uses (grep strom/ for fsync, os.replace, ftruncate, O_APPEND) is all modelled: segment
  appends on O_APPEND descriptors, ftruncate of segments and indexes, fsync of files and directories,
  and write-to-temporary, fsync, os.replace for checkpoints, writer snapshots and the epoch cache.
  RocksDB (PK tables) uses the same calls plus fallocate, which it treats as optional.

Every process using the mount must be dead before power_cut() (the caller SIGKILLs them): the cut
refuses every operation still in flight (EIO), then the daemon is replaced by a fresh one on the
reverted directory, which also empties the kernel's page and attribute caches, as a reboot does.

Overhead, measured with bench/lazyfs_overhead.py on the shared 2-core machine (64 MiB appended with
os.write per run, median of 3, against a plain directory on the same ext4 disk): every write is a
round trip through the kernel into the Python daemon, about 0.25 ms, so small writes pay most:
4 KiB writes 15 MB/s (plain 366 MB/s), 64 KiB writes 290 MB/s (plain 4000), 1 MiB writes 900 MB/s
(plain 2900); with an fsync every MiB both are disk-bound (440 vs 416 MB/s). Strom appends whole
batches, so pyfluss appending 128 MiB of wide Arrow batches to one tablet server ran at 317 MB/s
with its data directory on a LazyMount against 192 MB/s on the plain disk: within the noise of the
shared machine, i.e. no measurable overhead on the server's append path.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import pytest

DAEMON = Path(__file__).with_name("lazyfs_fuse.py")
GRAVEYARD = ".lazyfs-graveyard"  # the daemon's, inside the backing directory
START_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 10.0


class LazyMountError(RuntimeError):
    """The FUSE daemon failed to mount, answer or exit in time; the message carries its stderr."""


def fuse_available() -> str | None:
    """None when a LazyMount can work here, else why not (for a skip or a refusal)."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if os.geteuid() != 0:
        return "mounting FUSE file systems here needs root"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as e:
        return f"mfusepy cannot load libfuse ({e}): run scripts/install_fuse.sh"
    return None


def requires_fuse() -> pytest.MarkDecorator:
    """Marks a test that needs a LazyMount: skipped on a machine without FUSE, but failed (not
    skipped) under CI, where `make test` installs what it needs, so a power-cut test never vanishes
    silently from the suite."""
    reason = fuse_available()
    return pytest.mark.skipif(reason is not None and not os.environ.get("CI"), reason=str(reason))


def is_mounted(path: Path) -> bool:
    """Whether `path` is a mount point in this process's mount namespace (a dead FUSE mount included,
    which os.path.ismount cannot stat)."""
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4 and _unescape(fields[4]) == target:
                return True
    return False


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


class LazyMount:
    """`mountpoint` shows `backing` through a FUSE daemon that can forget unsynced writes."""

    def __init__(self, backing: Path, mountpoint: Path) -> None:
        self.backing = Path(backing)
        self.mountpoint = Path(mountpoint)
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: IO[str] | None = None
        self.cuts = 0
        self.last_cut: dict[str, Any] = {}

    # -- lifecycle
    def start(self) -> None:
        why = fuse_available()
        if why is not None:
            raise LazyMountError(f"cannot mount {self.mountpoint}: {why}")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        if is_mounted(self.mountpoint):
            raise LazyMountError(f"{self.mountpoint} is already a mount point")
        self._spawn()

    def power_cut(self, torn_seed: int | None = None) -> None:
        """Drop every write not made durable; afterwards the mount is usable again. With `torn_seed`,
        each file that grew since its last fsync keeps a seeded random prefix of its growth instead of
        none of it: a torn tail, as when write-back of an append had begun when the power went."""
        if self._process is None:
            raise LazyMountError("power_cut on a LazyMount that is not started")
        command = "cut" if torn_seed is None else f"cut {int(torn_seed)}"
        answer = self._command(command)
        result = json.loads(answer.removeprefix("cut "))
        self._halt()
        if result["failures"]:
            raise LazyMountError(f"power cut could not restore the durable state: {result['failures']}")
        self.cuts += 1
        self.last_cut = result
        self._spawn()

    def stats(self) -> dict[str, Any]:
        """The daemon's counters: fsyncs, journal commits, writes, bytes saved, files not yet synced."""
        answer = self._command("stats")
        stats: dict[str, Any] = json.loads(answer.removeprefix("stats "))
        return stats

    def stop(self) -> None:
        """Unmount and clean up (the backing directory keeps everything written); idempotent."""
        self._halt()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.backing / GRAVEYARD)

    def __enter__(self) -> LazyMount:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- the daemon
    def _spawn(self) -> None:
        # closed by _halt: the daemon's stderr lives as long as the daemon
        self._stderr = tempfile.TemporaryFile(mode="w+", prefix="lazyfs-", suffix=".log")  # noqa: SIM115
        self._lines = queue.Queue()
        process = subprocess.Popen(
            [sys.executable, "-u", str(DAEMON), str(self.backing), str(self.mountpoint)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,  # a Ctrl-C of the test runner must not kill it before the unmount
        )
        self._process = process
        assert process.stdout is not None
        threading.Thread(target=_pump, args=(process.stdout, self._lines), daemon=True).start()
        try:
            line = self._next_line(START_TIMEOUT_S, "mount")
            if line != "ready":
                raise LazyMountError(f"the lazyfs daemon said {line!r} instead of ready{self._stderr_tail()}")
            if not is_mounted(self.mountpoint):
                raise LazyMountError(f"lazyfs is ready but {self.mountpoint} is not mounted")
        except BaseException:
            self._halt()
            raise

    def _command(self, command: str) -> str:
        process = self._process
        if process is None or process.stdin is None:
            raise LazyMountError(f"{command}: the lazyfs daemon is not running")
        try:
            process.stdin.write(command + "\n")
            process.stdin.flush()
        except OSError as e:
            raise LazyMountError(f"{command}: the lazyfs daemon is gone ({e}){self._stderr_tail()}") from e
        line = self._next_line(COMMAND_TIMEOUT_S, command)
        if not line.startswith(command.split()[0] + " "):
            raise LazyMountError(f"{command}: the lazyfs daemon answered {line!r}{self._stderr_tail()}")
        return line

    def _next_line(self, timeout: float, what: str) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise LazyMountError(
                f"{what}: no answer from the lazyfs daemon in {timeout:.0f} s{self._stderr_tail()}"
            ) from None
        if line is None:
            raise LazyMountError(f"{what}: the lazyfs daemon exited{self._stderr_tail()}")
        return line

    def _halt(self) -> None:
        """End the daemon (closing its stdin asks it to unmount) and make sure nothing stays mounted."""
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(OSError):
                if process.stdin is not None:
                    process.stdin.close()
            try:
                process.wait(EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()  # closing /dev/fuse aborts the connection: nothing can hang on it now
                process.wait(EXIT_TIMEOUT_S)
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while is_mounted(self.mountpoint):
            # left behind by a killed daemon (or libfuse's unmount failed): a lazy unmount detaches it
            subprocess.run(
                ["umount", "-l", str(self.mountpoint)], capture_output=True, timeout=EXIT_TIMEOUT_S
            )
            if time.monotonic() > deadline:
                raise LazyMountError(f"{self.mountpoint} is still mounted{self._stderr_tail()}")
            time.sleep(0.05)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.flush()
            self._stderr.seek(0)
            tail = self._stderr.read()[-2000:].strip()
            if tail:
                return f"\nlazyfs daemon stderr:\n{tail}"
        return ""


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


if __name__ == "__main__":  # a quick look by hand: python tests/faults/lazyfs.py BACKING MOUNTPOINT
    with LazyMount(Path(sys.argv[1]), Path(sys.argv[2])) as mount:
        print(f"mounted {sys.argv[2]}; Ctrl-C to unmount", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()

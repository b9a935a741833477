"""The FUSE daemon behind `LazyMount` (tests/faults/lazyfs.py, which documents what it models).

Run as a script by LazyMount, never imported by the test runner (a hung file system must not freeze it):

    python lazyfs_fuse.py BACKING MOUNTPOINT

Every operation goes straight through to BACKING, so reads always see what was written (the page
cache). Next to that, a `DurabilityJournal` remembers how to get back to the durable state: for each
file written since its last fsync, its durable size and the original bytes of every durable range
that was overwritten or cut off; for the directory tree, an undo entry for every create, mkdir,
unlink, rmdir, rename and link since the last journal commit. Unlinked and replaced files are kept
under a hidden graveyard directory in BACKING until the commit makes their removal durable.

Control is line-based on stdin/stdout: the daemon prints `ready` once mounted; `cut` reverts BACKING
to its durable state, answers `cut {json}` and refuses every file operation from then on (EIO: the
power is off); `cut SEED` does the same but keeps a seeded random prefix of each file's unsynced
growth (a torn tail); `stats` answers `stats {json}`. End of stdin (LazyMount stopped, or the test runner
died) unmounts and exits, so a mount never outlives its owner.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import signal
import stat
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import mfusepy as fuse

GRAVEYARD = ".lazyfs-graveyard"

log = logging.getLogger("lazyfs")


def _error(code: int) -> fuse.FuseOSError:
    return fuse.FuseOSError(code)


@dataclass
class FileState:
    """What a file written since its last fsync reverts to on a power cut."""

    fd: int  # a private O_RDWR descriptor: reverts work after renames and unlinks, and the inode
    # number cannot be reused while the state lives
    durable_size: int
    # original bytes of durable ranges overwritten or truncated away since the last fsync: sorted,
    # disjoint (offset, bytes); the first change of a range saves it, later ones find it saved
    saved: list[tuple[int, bytes]] = field(default_factory=list)
    # the smallest size a truncate set since the last journal commit: ext4 journals a size change
    # as metadata, so the next commit makes the cut durable even without an fsync of this file
    shrunk_to: int | None = None

    def save(self, start: int, end: int) -> int:
        """Keep the original bytes of [start, end) ∩ [0, durable_size) not saved yet; returns bytes copied."""
        end = min(end, self.durable_size)
        copied = 0
        if start >= end:
            return 0
        gaps: list[tuple[int, int]] = []
        cursor = start
        for offset, data in self.saved:
            if offset >= end:
                break
            stop = offset + len(data)
            if stop <= cursor:
                continue
            if offset > cursor:
                gaps.append((cursor, offset))
            cursor = max(cursor, stop)
        if cursor < end:
            gaps.append((cursor, end))
        for gap_start, gap_end in gaps:
            data = os.pread(self.fd, gap_end - gap_start, gap_start)
            # a durable range can only be shorter on disk after a truncate, which saved it already
            if len(data) != gap_end - gap_start:
                raise OSError(errno.EIO, f"short read saving [{gap_start}, {gap_end})")
            self.saved.append((gap_start, data))
            copied += len(data)
        if gaps:
            self.saved.sort(key=lambda item: item[0])
        return copied

    def clip(self, size: int) -> None:
        """The durable size drops to `size`: forget what was saved beyond it."""
        self.durable_size = min(self.durable_size, size)
        kept: list[tuple[int, bytes]] = []
        for offset, data in self.saved:
            if offset < self.durable_size:
                kept.append((offset, data[: self.durable_size - offset]))
        self.saved = kept

    def revert(self, torn_seed: int | None) -> None:
        current = os.fstat(self.fd).st_size
        for offset, data in self.saved:
            os.pwrite(self.fd, data, offset)
        size = self.durable_size
        if torn_seed is not None and current > size:
            # some of the growth was written back before the cut: a prefix of it, cut anywhere (a
            # torn write). Seeded by the file's own sizes, so a replay with the seed cuts the same.
            rng = random.Random(f"{torn_seed}:{size}:{current}")
            size += rng.randint(0, current - size)
        os.ftruncate(self.fd, size)


@dataclass
class Undo:
    """One namespace change since the last journal commit, with what it takes to take it back."""

    kind: str  # create | mkdir | unlink | rmdir | rename
    path: str  # backing path (the new name for a rename)
    old: str = ""  # rename: the old backing path
    grave: str = ""  # unlink / rename over a file: where the removed file is kept
    mode: int = 0  # rmdir / rename over a directory: the removed directory's mode


class DurabilityJournal:
    """The difference between BACKING (what the file system shows) and what would survive a power cut."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.graveyard = os.path.join(self.root, GRAVEYARD)
        self.lock = threading.RLock()
        self.files: dict[int, FileState] = {}
        self.undo: list[Undo] = []
        self.powered = True
        self._graves = 0
        self.stats = {"fsyncs": 0, "commits": 0, "saved_bytes": 0, "writes": 0}
        _remove_tree(self.graveyard)  # left by a daemon that was killed: removals nobody can undo now
        os.mkdir(self.graveyard, 0o700)

    # -- paths
    def real(self, path: str) -> str:
        if path == "/" + GRAVEYARD or path.startswith("/" + GRAVEYARD + "/"):
            raise _error(errno.ENOENT)
        return self.root + path

    def check_powered(self) -> None:
        if not self.powered:
            raise _error(errno.EIO)

    def _grave(self) -> str:
        self._graves += 1
        return os.path.join(self.graveyard, str(self._graves))

    # -- file data
    def state_of(self, fd: int) -> FileState:
        """The state of the file open as `fd`, tracked from now on if it was clean (durable = current)."""
        ino = os.fstat(fd).st_ino
        state = self.files.get(ino)
        if state is None:
            private = os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
            state = FileState(private, os.fstat(private).st_size)
            self.files[ino] = state
        return state

    def before_write(self, fd: int, offset: int, length: int) -> None:
        state = self.state_of(fd)
        if offset < state.durable_size:
            self.stats["saved_bytes"] += state.save(offset, offset + length)
        self.stats["writes"] += 1

    def before_truncate(self, fd: int, length: int) -> None:
        state = self.state_of(fd)
        current = os.fstat(fd).st_size
        if length < current:
            self.stats["saved_bytes"] += state.save(length, current)
            state.shrunk_to = length if state.shrunk_to is None else min(state.shrunk_to, length)

    def fsync(self, fd: int) -> None:
        """fsync/fdatasync of a file: its data and size become durable, and (ext4) the journal commits."""
        self.stats["fsyncs"] += 1
        ino = os.fstat(fd).st_ino
        state = self.files.pop(ino, None)
        if state is not None:
            os.close(state.fd)
        self.commit()

    def commit(self) -> None:
        """A journal commit (ext4 commits the whole running transaction on any fsync): every namespace
        change so far becomes durable, and so do the sizes that truncates set."""
        self.stats["commits"] += 1
        for state in self.files.values():
            if state.shrunk_to is not None:
                state.clip(state.shrunk_to)
                state.shrunk_to = None
        for entry in self.undo:
            if entry.grave:
                self._bury(entry.grave)
        self.undo.clear()

    def _bury(self, grave: str) -> None:
        """Remove a graveyard entry for good, with the state of its file."""
        try:
            st = os.lstat(grave)
        except FileNotFoundError:
            return
        state = self.files.get(st.st_ino)
        if state is not None and st.st_nlink <= 1:
            os.close(state.fd)
            del self.files[st.st_ino]
        if stat.S_ISDIR(st.st_mode):
            os.rmdir(grave)
        else:
            os.unlink(grave)

    # -- namespace
    def created(self, real: str) -> None:
        self.undo.append(Undo("create", real))

    def mkdir(self, real: str, mode: int) -> None:
        os.mkdir(real, mode)
        self.undo.append(Undo("mkdir", real))

    def unlink(self, real: str) -> None:
        grave = self._grave()
        os.rename(real, grave)
        self.undo.append(Undo("unlink", real, grave=grave))

    def rmdir(self, real: str) -> None:
        mode = stat.S_IMODE(os.lstat(real).st_mode)
        os.rmdir(real)
        self.undo.append(Undo("rmdir", real, mode=mode))

    def rename(self, old: str, new: str) -> None:
        try:
            target = os.lstat(new)
        except FileNotFoundError:
            target = None
        if target is None:
            os.rename(old, new)
            self.undo.append(Undo("rename", new, old=old))
        elif stat.S_ISDIR(target.st_mode):
            # rename(2) replaces only an empty directory: undone by making it again
            os.rename(old, new)
            self.undo.append(Undo("rename", new, old=old, mode=stat.S_IMODE(target.st_mode)))
        else:
            grave = self._grave()
            os.link(new, grave, follow_symlinks=False)  # the replaced file, kept for an undo
            try:
                os.rename(old, new)
            except OSError:
                os.unlink(grave)
                raise
            self.undo.append(Undo("rename", new, old=old, grave=grave))

    # -- the power cut
    def cut(self, torn_seed: int | None = None) -> dict[str, Any]:
        """Revert BACKING to its durable state and refuse everything from now on. With `torn_seed`,
        each file that grew since its last fsync keeps a seeded random prefix of that growth."""
        with self.lock:
            self.powered = False
            reverted_files = len(self.files)
            undone = len(self.undo)
            failures: list[str] = []
            for state in self.files.values():
                try:
                    state.revert(torn_seed)
                except OSError as e:
                    failures.append(f"revert of inode data: {e}")
                finally:
                    os.close(state.fd)
            self.files.clear()
            for entry in reversed(self.undo):
                try:
                    _take_back(entry)
                except OSError as e:
                    failures.append(f"undo {entry}: {e}")
            self.undo.clear()
            _remove_tree(self.graveyard)
            return {"reverted_files": reverted_files, "undone": undone, "failures": failures}

    def close(self) -> None:
        """A clean unmount: everything written stays (what a clean shutdown writes back)."""
        with self.lock:
            for state in self.files.values():
                os.close(state.fd)
            self.files.clear()
            self.undo.clear()
            _remove_tree(self.graveyard)


def _take_back(entry: Undo) -> None:
    if entry.kind == "create":
        os.unlink(entry.path)
    elif entry.kind == "mkdir":
        os.rmdir(entry.path)
    elif entry.kind == "unlink":
        os.rename(entry.grave, entry.path)
    elif entry.kind == "rmdir":
        os.mkdir(entry.path, entry.mode)
    elif entry.kind == "rename":
        os.rename(entry.path, entry.old)
        if entry.grave:
            os.rename(entry.grave, entry.path)
        elif entry.mode:
            os.mkdir(entry.path, entry.mode)
    else:
        raise OSError(errno.EINVAL, f"unknown undo kind {entry.kind}")


def _remove_tree(path: str) -> None:
    if not os.path.lexists(path):
        return
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                os.unlink(full)
            else:
                os.rmdir(full)
    os.rmdir(path)


_STAT_KEYS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")


def _attrs(st: os.stat_result) -> dict[str, Any]:
    attrs: dict[str, Any] = {key: getattr(st, key) for key in _STAT_KEYS}
    attrs["st_atime"] = st.st_atime_ns
    attrs["st_mtime"] = st.st_mtime_ns
    attrs["st_ctime"] = st.st_ctime_ns
    return attrs


class LazyOperations(fuse.Operations):
    """Passthrough to BACKING that tells the journal about every change before making it."""

    use_ns = True

    def __init__(self, journal: DurabilityJournal) -> None:
        self.j = journal

    def init(self, path: str) -> None:
        print("ready", flush=True)

    def destroy(self, path: str) -> None:
        if self.j.powered:
            self.j.close()

    # -- attributes and directories
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        self.j.check_powered()
        if fh is not None:
            return _attrs(os.fstat(fh))
        return _attrs(os.lstat(self.j.real(path)))

    def readdir(self, path: str, fh: int) -> list[str]:
        self.j.check_powered()
        names = os.listdir(self.j.real(path))
        if path == "/":
            names = [name for name in names if name != GRAVEYARD]
        return [".", "..", *names]

    def readlink(self, path: str) -> str:
        self.j.check_powered()
        return os.readlink(self.j.real(path))

    def statfs(self, path: str) -> dict[str, Any]:
        sv = os.statvfs(self.j.root)
        keys = (
            "f_bavail",
            "f_bfree",
            "f_blocks",
            "f_bsize",
            "f_favail",
            "f_ffree",
            "f_files",
            "f_flag",
            "f_frsize",
            "f_namemax",
        )
        return {key: getattr(sv, key) for key in keys}

    def chmod(self, path: str, mode: int) -> int:
        self.j.check_powered()
        os.chmod(self.j.real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        self.j.check_powered()
        os.chown(self.j.real(path), uid, gid, follow_symlinks=False)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        self.j.check_powered()
        if times is None:
            os.utime(self.j.real(path), follow_symlinks=False)
        else:
            os.utime(self.j.real(path), ns=times, follow_symlinks=False)
        return 0

    # -- namespace changes
    def mkdir(self, path: str, mode: int) -> int:
        with self.j.lock:
            self.j.check_powered()
            self.j.mkdir(self.j.real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        with self.j.lock:
            self.j.check_powered()
            self.j.rmdir(self.j.real(path))
        return 0

    def unlink(self, path: str) -> int:
        with self.j.lock:
            self.j.check_powered()
            self.j.unlink(self.j.real(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        with self.j.lock:
            self.j.check_powered()
            self.j.rename(self.j.real(old), self.j.real(new))
        return 0

    def symlink(self, target: str, source: str) -> int:
        with self.j.lock:
            self.j.check_powered()
            real = self.j.real(target)
            os.symlink(source, real)
            self.j.created(real)
        return 0

    def link(self, target: str, source: str) -> int:
        with self.j.lock:
            self.j.check_powered()
            real = self.j.real(target)
            os.link(self.j.real(source), real)
            self.j.created(real)
        return 0

    def mknod(self, path: str, mode: int, dev: int) -> int:
        with self.j.lock:
            self.j.check_powered()
            real = self.j.real(path)
            os.mknod(real, mode, dev)
            self.j.created(real)
        return 0

    # -- files
    @staticmethod
    def _backing_flags(flags: int) -> int:
        # The kernel passes the offset of every write (O_APPEND included): pwrite on an O_APPEND
        # descriptor would ignore it. O_TRUNC is done as a journaled truncate. Write access implies read
        # access for us: a changed range's original bytes must be read first.
        if flags & os.O_DIRECT:
            # writes that bypass the page cache are durable at once on a real disk: not modelled
            raise _error(errno.EINVAL)
        flags &= ~(os.O_APPEND | os.O_TRUNC | os.O_CREAT | os.O_EXCL)
        if flags & os.O_ACCMODE != os.O_RDONLY:
            flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
        return flags | os.O_CLOEXEC

    def create(self, path: str, mode: int, flags: int) -> int:
        with self.j.lock:
            self.j.check_powered()
            real = self.j.real(path)
            try:
                fd = os.open(real, self._backing_flags(flags) | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                if flags & os.O_EXCL:
                    raise
                return self.open(path, flags)  # lost a race with another creator: an ordinary open
            self.j.created(real)
            return fd

    def open(self, path: str, flags: int) -> int:
        with self.j.lock:
            self.j.check_powered()
            fd = os.open(self.j.real(path), self._backing_flags(flags))
            if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
                self.j.before_truncate(fd, 0)
                os.ftruncate(fd, 0)
            return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self.j.check_powered()
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self.j.lock:
            self.j.check_powered()
            self.j.before_write(fh, offset, len(data))
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self.j.lock:
            self.j.check_powered()
            fd = fh if fh is not None else os.open(self.j.real(path), os.O_RDWR | os.O_CLOEXEC)
            try:
                self.j.before_truncate(fd, length)
                os.ftruncate(fd, length)
            finally:
                if fh is None:
                    os.close(fd)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # close(2) makes nothing durable

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self.j.lock:
            self.j.check_powered()
            self.j.fsync(fh)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self.j.lock:
            self.j.check_powered()
            self.j.stats["fsyncs"] += 1
            self.j.commit()
        return 0


class _LazyFUSE(fuse.FUSE):
    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        # RENAME_NOREPLACE / RENAME_EXCHANGE are not modelled: refused rather than ignored
        if flags:
            return -errno.EINVAL
        return super().rename_fuse_3(old, new, flags)


def _control(journal: DurabilityJournal) -> None:
    """Commands from LazyMount on stdin; end of input unmounts (SIGTERM makes libfuse leave its loop)."""
    for line in sys.stdin:
        command = line.strip()
        if command == "cut" or command.startswith("cut "):
            seed = command.removeprefix("cut").strip()
            print("cut " + json.dumps(journal.cut(int(seed) if seed else None)), flush=True)
        elif command == "stats":
            with journal.lock:
                stats = dict(journal.stats, dirty_files=len(journal.files), undo=len(journal.undo))
            print("stats " + json.dumps(stats), flush=True)
        elif command:
            print(f"error unknown command {command!r}", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="lazyfs %(levelname)s %(message)s")
    backing, mountpoint = argv
    journal = DurabilityJournal(backing)
    threading.Thread(target=_control, args=(journal,), name="lazyfs-control", daemon=True).start()
    _LazyFUSE(
        LazyOperations(journal),
        mountpoint,
        foreground=True,
        allow_other=True,
        # an unlinked open file is really unlinked (not renamed to .fuse_hidden*): the journal sees
        # one unlink, and later operations on the open file come with its handle
        hard_remove=True,
        fsname="lazyfs",
        subtype="lazyfs",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

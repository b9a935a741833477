"""One supervision policy for every background task of a Strom process (servers and client alike).

asyncio keeps only a weak reference to a task, and an exception of a task nobody awaits is at best
a "Task exception was never retrieved" line at garbage collection. So no code in `strom/` calls
`create_task` itself; it uses one of these instead:

- `spawn(coro, name=...)` for one-off work (a notification, one request's handling): the task is held
  until it ends, and an exception it ends with is logged and counted, never lost;
- `supervise(factory, name=..., policy=...)` for a loop that must keep running: when it fails it is
  started again after a backoff (`RESTART`), or, when the process cannot do its job without it
  (`FATAL`), the process exits non-zero so that whatever runs it (`strom local`, systemd, Kubernetes)
  starts it afresh instead of leaving a process up that does nothing;
- `TaskSet` when an owner (a connection, a fetcher) must cancel or wait for its own tasks together.

Servers count restarts and failures in their metrics (`strom.metrics.supervision` listens here);
the client only logs, and never exits a process it is a library in: it does not use `FATAL`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger("strom.supervision")

T = TypeVar("T")

# EX_SOFTWARE from sysexits.h: an internal error the process could not go on after.
FATAL_EXIT_CODE = 70


class Policy(enum.Enum):
    RESTART = "restart"  # the work can go on: start it again after a backoff
    FATAL = "fatal"  # the process cannot do its job without it: exit non-zero


class Event(enum.Enum):
    FAILED = "failed"  # a task ended with an exception (it is logged)
    RESTARTED = "restarted"  # a supervised loop is started again after failing
    FATAL = "fatal"  # a fatal task failed: the process exits


@dataclass(frozen=True)
class Backoff:
    """Exponential delays between restarts; a loop that ran `reset_after` seconds starts over at `initial`."""

    initial: float = 0.1
    maximum: float = 10.0
    factor: float = 2.0
    reset_after: float = 30.0

    def delays(self) -> Iterator[float]:
        delay = self.initial
        while True:
            yield delay
            delay = min(self.maximum, delay * self.factor)


Listener = Callable[[Event, str], None]
_listeners: list[Listener] = []


def add_listener(listener: Listener) -> Callable[[], None]:
    """Called with every event (a server's metrics count them); returns a function that removes it."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener) if listener in _listeners else None


def _notify(event: Event, name: str) -> None:
    for listener in list(_listeners):
        try:
            listener(event, name)
        except Exception:  # a broken metric must not break supervision
            log.exception("supervision listener failed")


def _exit_process(name: str) -> None:
    # os._exit, not sys.exit: a SystemExit raised inside a task would only end that task. Flush the
    # logs first so the reason is on record next to the exit code.
    logging.shutdown()
    sys.stderr.flush()
    os._exit(FATAL_EXIT_CODE)


_fatal_handler: Callable[[str], None] = _exit_process


def set_fatal_handler(handler: Callable[[str], None] | None) -> None:
    """Replace what a fatal failure does (tests record it instead of exiting); None restores the exit."""
    global _fatal_handler
    _fatal_handler = handler or _exit_process


def fatal(name: str, reason: BaseException | str) -> None:
    """The process cannot go on: log why, and exit non-zero (or call the installed handler)."""
    if isinstance(reason, BaseException):
        log.critical("%s cannot go on; exiting with code %d", name, FATAL_EXIT_CODE, exc_info=reason)
    else:
        log.critical("%s cannot go on (%s); exiting with code %d", name, reason, FATAL_EXIT_CODE)
    _notify(Event.FATAL, name)
    _fatal_handler(name)


class TaskSet:
    """Tasks an owner starts and later cancels together; each is held until it ends, its error logged."""

    def __init__(self, owner: str = "") -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str = "", quiet: bool = False) -> asyncio.Task[T]:
        """`quiet`: whoever awaits the task reports its error; only retrieve it here, do not log it."""
        task = asyncio.get_running_loop().create_task(coro, name=name or None)
        self._tasks.add(task)
        task.add_done_callback(self._done_quietly if quiet else self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        _observe(task, self.owner)

    def _done_quietly(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def close(self) -> None:
        """Cancel every task and wait until they have all ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _observe(task: asyncio.Task[Any], owner: str) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is None:
        return
    where = f"{owner}: " if owner else ""
    log.error("%sbackground task %s failed", where, task.get_name(), exc_info=error)
    _notify(Event.FAILED, task.get_name())


# Tasks spawned without an owner: held here so the event loop's weak reference is not the only one.
_process_tasks = TaskSet()


def spawn(coro: Coroutine[Any, Any, T], *, name: str = "", quiet: bool = False) -> asyncio.Task[T]:
    """Run one-off work in the background: held until it ends; an exception is logged and counted."""
    return _process_tasks.spawn(coro, name=name, quiet=quiet)


def supervise(
    factory: Callable[[], Coroutine[Any, Any, Any]],
    *,
    name: str,
    policy: Policy = Policy.RESTART,
    backoff: Backoff = Backoff(),
    tasks: TaskSet | None = None,
) -> asyncio.Task[None]:
    """Run `factory()` in a task that outlives its failures.

    A normal return ends the task (a loop that saw its stop signal); cancelling the task stops it.
    An exception restarts it after a backoff (RESTART) or ends the process (FATAL).
    """
    owner = tasks if tasks is not None else _process_tasks
    return owner.spawn(_supervised(factory, name, policy, backoff), name=name)


async def _supervised(
    factory: Callable[[], Coroutine[Any, Any, Any]], name: str, policy: Policy, backoff: Backoff
) -> None:
    loop = asyncio.get_running_loop()
    delays = backoff.delays()
    while True:
        started = loop.time()
        try:
            await factory()
            return
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if policy is Policy.FATAL:
                fatal(name, e)
                return
            if loop.time() - started >= backoff.reset_after:
                delays = backoff.delays()  # it ran a good while: a fresh failure, not a crash loop
            delay = next(delays)
            log.error("%s failed; restarting it in %.1fs", name, delay, exc_info=e)
            _notify(Event.FAILED, name)
        await asyncio.sleep(delay)
        log.info("restarting %s", name)
        _notify(Event.RESTARTED, name)

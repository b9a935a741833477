"""Connecting to ZooKeeper (kazoo) with Fluss's `zookeeper.*` options.

kazoo runs its own threads; its blocking calls are made from executor threads (`call`) and its watch
callbacks hop back onto the server's event loop (`on_loop`), so the asyncio side never blocks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import FlussError, StorageError
from strom.server.zookeeper.layout import ZkPaths

log = logging.getLogger(__name__)

T = TypeVar("T")


def paths_of(config: Configuration) -> ZkPaths:
    return ZkPaths(config.get(options.ZOOKEEPER_PATH_ROOT))


def session_timeout(config: Configuration) -> float:
    return config.get(options.ZOOKEEPER_SESSION_TIMEOUT).total_seconds()


def connect(config: Configuration) -> KazooClient:
    """A started client (blocking until connected, at most zookeeper.client.connection-timeout)."""
    address = config.get(options.ZOOKEEPER_ADDRESS)
    client = KazooClient(
        hosts=address,
        timeout=session_timeout(config),
        # keep reconnecting for as long as the server runs; a lost session is handled by the owner
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
        command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0),
    )
    try:
        client.start(timeout=config.get(options.ZOOKEEPER_CONNECTION_TIMEOUT).total_seconds())
    except KazooTimeoutError:
        client.close()
        raise StorageError(f"cannot connect to ZooKeeper at {address}") from None
    log.info("connected to ZooKeeper at %s (session timeout %.1fs)", address, session_timeout(config))
    return client


# Answers about the data that callers act on (the node exists, is gone, changed, has children); every
# other ZooKeeper failure (connection, session, timeout) becomes a StorageError.
_OUTCOMES = (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError)


async def call(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking kazoo call on an executor thread; ZooKeeper failures become StorageError."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(None, partial(function, *args, **kwargs))
    except (FlussError, *_OUTCOMES):
        raise
    except (KazooException, KazooTimeoutError) as e:
        raise StorageError(f"ZooKeeper: {type(e).__name__}: {e}") from e


def on_loop(loop: asyncio.AbstractEventLoop, function: Callable[..., Any]) -> Callable[..., None]:
    """A kazoo callback that runs `function` on the event loop instead of kazoo's thread."""

    def callback(*args: Any) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(lambda: function(*args))

    return callback

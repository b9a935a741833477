"""One shared client component per connection (lookup batching, writer machinery...), made on first
use and closed with the connection."""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from strom.client.connection import Connection

__all__ = ["PerConnection"]


class _Component(Protocol):
    @property
    def closed(self) -> bool: ...

    def close(self) -> Awaitable[None]: ...


C = TypeVar("C", bound=_Component)


class PerConnection(Generic[C]):
    def __init__(self, factory: Callable[[Connection], C]) -> None:
        self._factory = factory
        # Weak: a component must not keep a forgotten connection alive.
        self._components: weakref.WeakKeyDictionary[Connection, C] = weakref.WeakKeyDictionary()

    def get(self, connection: Connection) -> C:
        """The connection's component; a new one when there is none yet or the last one was closed."""
        component = self._components.get(connection)
        if component is None or component.closed:
            component = self._factory(connection)
            self._components[connection] = component
            connection.add_close_hook(component.close)
        return component

"""A TCP proxy on loopback in front of one server that can lose everything sent through it.

Packet loss between two live hosts, without network namespaces: the server advertises the proxy's
port, so the coordinator, its peers and clients reach it through the proxy (its own requests to
others go direct, so it keeps heartbeating). `drop()` discards the bytes of every connection from
then on, in both directions, as a partition would; `heal()` forwards again and closes the
connections that lost bytes, as TCP gives up on them, so their senders reconnect. Nothing lost is
ever delivered late.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field


@dataclass
class _Link:
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    lost: bool = False


class LossyProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.target_port = target_port
        self.port = 0
        self.dropping = False
        self.lost_bytes = 0
        self._links: list[_Link] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lossy-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def start(self) -> LossyProxy:
        self._thread.start()
        self._server = self._call(asyncio.start_server(self._accept, self.host, 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def drop(self) -> None:
        self._call(self._set(True))

    def heal(self) -> None:
        self._call(self._heal())

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for link in self._links:
                for w in link.writers:
                    w.close()

        self._call(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _call(self, coroutine):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    async def _set(self, dropping: bool) -> None:
        self.dropping = dropping

    async def _heal(self) -> None:
        self.dropping = False
        for link in [link for link in self._links if link.lost]:
            for w in link.writers:
                w.close()
            self._links.remove(link)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.close()
            return
        link = _Link([writer, up_writer])
        self._links.append(link)
        await asyncio.gather(self._pump(reader, up_writer, link), self._pump(up_reader, writer, link))
        for w in link.writers:
            w.close()
        if link in self._links:
            self._links.remove(link)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link) -> None:
        try:
            while data := await reader.read(65536):
                if self.dropping or link.lost:
                    link.lost = True
                    self.lost_bytes += len(data)
                    continue
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

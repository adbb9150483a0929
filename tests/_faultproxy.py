"""A TCP proxy on 127.0.0.1 that puts network faults between tether and Postgres.

Every connection a client opens to the proxy gets its own connection to the
server, and bytes are pumped both ways until a fault says otherwise:

- `black_hole`: nothing passes either way, and nothing is reset, as when a
  route vanishes; held bytes pass once it ends (TCP would retransmit them);
- `refuse`: new connections are closed at once, unanswered;
- `drop`: every open connection is reset (RST), as when a NAT or a firewall
  forgets them;
- `latency`: each chunk waits ``delay`` plus up to ``jitter`` seconds, in order;
- `cut_after`: the first request whose bytes hold a marker (an execution id,
  a payload) reaches the server, and once the server has answered, the answer
  is thrown away and both sides are reset: the client cannot know whether the
  statement took effect. ``before=True`` resets before the server sees it.

asyncpg sends a statement's parameters in its Bind message as they are, so a
marker that is a parameter (an id, a JSON value) is found in the bytes.
"""

from __future__ import annotations

import random
import socket
import struct
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@dataclass
class _Cut:
    marker: bytes
    before: bool
    done: anyio.Event = field(default_factory=anyio.Event)


class _Link:
    """One client connection and its server connection."""

    def __init__(self, client: anyio.abc.SocketStream, server: anyio.abc.SocketStream) -> None:
        self.client = client
        self.server = server
        self.scope = anyio.CancelScope()
        self.cut: _Cut | None = None  # its marker passed: reset once the server answers

    async def reset(self) -> None:
        with anyio.CancelScope(shield=True):
            for stream in (self.client, self.server):
                _linger_zero(stream)
                await stream.aclose()
        self.scope.cancel()


class FaultProxy:
    """Forward 127.0.0.1:`port` to ``host:port``, with faults on demand. Use as ``async with``."""

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        query = parse_qs(parts.query)
        socket_dir = query.pop("host", [None])[-1]
        # The server by TCP, or by its Unix socket (a throwaway server listens on one only).
        self._unix = f"{socket_dir}/.s.PGSQL.{parts.port or 5432}" if socket_dir else None
        self._tcp = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._parts, self._query = parts, query
        self.port = 0
        self.connections = 0  # accepted so far
        self._links: set[_Link] = set()
        self._flowing = anyio.Event()
        self._flowing.set()
        self._refusing = False
        self._delay = 0.0
        self._jitter = 0.0
        self._cut: _Cut | None = None
        self._random = random.Random(7)

    @classmethod
    @asynccontextmanager
    async def to(cls, dsn: str) -> AsyncIterator[FaultProxy]:
        """A proxy in front of the server ``dsn`` names; its `dsn` reaches that server through it."""
        proxy = cls(dsn)
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        proxy.port = listener.extra(SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, proxy._serve, tg)
            try:
                yield proxy
            finally:
                proxy.heal()
                for link in list(proxy._links):
                    await link.reset()
                tg.cancel_scope.cancel()

    @property
    def dsn(self) -> str:
        """The DSN given, pointed at this proxy instead of the server."""
        user = self._parts.username or "postgres"
        password = f":{self._parts.password}" if self._parts.password else ""
        netloc = f"{user}{password}@127.0.0.1:{self.port}"
        return urlunsplit(self._parts._replace(netloc=netloc, query=urlencode(self._query, doseq=True)))

    # -- faults ---------------------------------------------------------------

    def black_hole(self) -> None:
        self._flowing = anyio.Event()

    def refuse(self) -> None:
        self._refusing = True

    def latency(self, delay: float, jitter: float = 0.0) -> None:
        self._delay, self._jitter = delay, jitter

    def cut_after(self, marker: str | bytes, *, before: bool = False) -> anyio.Event:
        """Cut the connection that carries ``marker`` next; the event is set once it is cut."""
        self._cut = _Cut(marker.encode() if isinstance(marker, str) else marker, before)
        return self._cut.done

    async def drop(self) -> int:
        """Reset every open connection; how many there were."""
        links = list(self._links)
        for link in links:
            await link.reset()
        return len(links)

    def heal(self) -> None:
        """Every fault off; held bytes flow again."""
        self._flowing.set()
        self._refusing = False
        self._delay = self._jitter = 0.0
        self._cut = None

    # -- pumping --------------------------------------------------------------

    async def _serve(self, client: anyio.abc.SocketStream) -> None:
        self.connections += 1
        # Closed shielded: under trio a stream's aclose() closes, then checkpoints,
        # and a cancelled checkpoint there would skip closing the other stream.
        try:
            if self._refusing:
                _linger_zero(client)
                return
            await self._flowing.wait()
            try:
                server: anyio.abc.SocketStream = (
                    await anyio.connect_unix(self._unix) if self._unix else await anyio.connect_tcp(*self._tcp))
            except OSError:
                return
            try:
                await self._forward(client, server)
            finally:
                with anyio.CancelScope(shield=True):
                    await server.aclose()
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def _forward(self, client: anyio.abc.SocketStream, server: anyio.abc.SocketStream) -> None:
        link = _Link(client, server)
        self._links.add(link)
        try:
            with link.scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._pump, link, client, server, True)
                    tg.start_soon(self._pump, link, server, client, False)
        finally:
            self._links.discard(link)

    async def _pump(self, link: _Link, source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream,
                    upstream: bool) -> None:
        try:
            while True:
                await self._flowing.wait()
                chunk = await source.receive()
                await self._flowing.wait()  # a black hole begun meanwhile holds this chunk too
                if self._delay or self._jitter:
                    await anyio.sleep(self._delay + self._random.uniform(0, self._jitter))
                cut = self._cut
                if upstream and cut is not None and cut.marker in chunk:
                    self._cut = None
                    if cut.before:
                        await link.reset()
                        cut.done.set()
                        return
                    link.cut = cut
                    await sink.send(chunk)
                    continue
                if not upstream and link.cut is not None:
                    await link.reset()  # the server answered: the answer is lost
                    link.cut.done.set()
                    return
                await sink.send(chunk)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            link.scope.cancel()


def _linger_zero(stream: anyio.abc.SocketStream) -> None:
    """Make the socket's close a reset (RST), not a goodbye (FIN)."""
    try:
        sock = stream.extra(SocketAttribute.raw_socket)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except (OSError, anyio.TypedAttributeLookupError):
        pass

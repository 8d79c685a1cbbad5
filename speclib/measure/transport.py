"""The kit's HTTP/1.1 transport: keep-alive connections that stamp every read as it arrives.

:class:`Http1Transport` is what :func:`speclib.measure.request_loop.run_requests` sends through.
An :class:`Endpoint` encodes each request's bytes (request line, headers, body) before
the clock starts, so sending is one ``transport.write``; the send is stamped just before
it. :class:`Connection` is an asyncio protocol that stamps each network read with
``perf_counter()`` first thing in ``data_received``, before any parsing, and feeds it to
the open :class:`~speclib.measure.http1.HttpResponse`; no coroutine wakes per chunk.
:class:`Pool` keeps one keep-alive connection per concurrency slot, opened ahead of the
run (uvloop when the caller's loop is uvloop).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from speclib.core.auth import auth_headers
from speclib.measure.http1 import HttpResponse

__all__ = ["Connection", "Endpoint", "Http1Transport", "Pool"]

PREWARM_TIMEOUT_S = 10.0
USER_AGENT = "speclib"


@dataclass(frozen=True)
class Endpoint:
    """Where requests go, and how to encode one request's bytes before the clock starts."""

    host: str
    port: int
    path: str
    tls: bool
    head: bytes  # request line and fixed headers, up to the Content-Length value

    @classmethod
    def of(cls, url: str, api_key: str | None) -> Endpoint:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"`base_url` must be an http(s) URL, got {url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        host = parts.hostname
        host_header = f"[{host}]" if ":" in host else host
        if parts.port:
            host_header += f":{port}"
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        lines = [
            f"POST {path} HTTP/1.1",
            f"Host: {host_header}",
            f"User-Agent: {USER_AGENT}",
            "Content-Type: application/json",
            "Accept: text/event-stream",
            "Accept-Encoding: identity",
        ]
        lines += [f"{k}: {v}" for k, v in auth_headers(api_key).items()]
        head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        return cls(host=host, port=port, path=path, tls=tls, head=head)

    def request(self, body: bytes) -> bytes:
        """The complete request: one ``write`` puts it on the wire."""
        return b"".join((self.head, str(len(body)).encode(), b"\r\n\r\n", body))


class Connection(asyncio.Protocol):
    """One keep-alive connection; stamps each read the moment the loop hands it over."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: HttpResponse | None = None
        self.alive = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.alive = True

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter()
        resp = self.response
        if resp is None or resp.end is not None:
            self.close()  # bytes nobody asked for: this connection cannot be trusted
            return
        resp.feed(data, t)

    def eof_received(self) -> bool:
        self.alive = False
        if self.response is not None:
            self.response.lost(None)
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.alive = False
        if self.response is not None:
            self.response.lost(exc)

    def close(self) -> None:
        self.alive = False
        if self.transport is not None:
            self.transport.close()


class Pool:
    """Keep-alive connections to one endpoint: reused LIFO, opened on demand or ahead."""

    def __init__(self, endpoint: Endpoint, loop: asyncio.AbstractEventLoop) -> None:
        self.endpoint = endpoint
        self.opened = 0
        self._loop = loop
        self._idle: list[Connection] = []
        self._all: set[Connection] = set()
        self._ssl = ssl.create_default_context() if endpoint.tls else None

    def idle(self) -> Connection | None:
        """A live idle connection, if any (no await: the fast path)."""
        while self._idle:
            conn = self._idle.pop()
            if conn.alive and conn.transport is not None and not conn.transport.is_closing():
                return conn
            self._all.discard(conn)
        return None

    async def open(self) -> Connection:
        ep = self.endpoint
        _, conn = await self._loop.create_connection(
            Connection, ep.host, ep.port, ssl=self._ssl, server_hostname=ep.host if ep.tls else None
        )
        self.opened += 1
        self._all.add(conn)
        return conn

    def put(self, conn: Connection) -> None:
        conn.response = None
        if conn.alive:
            self._idle.append(conn)
        else:
            self.drop(conn)

    def drop(self, conn: Connection) -> None:
        conn.close()
        self._all.discard(conn)

    async def prewarm(self, n: int) -> None:
        """Open up to ``n`` connections now, before any clock starts; errors are left to
        the requests themselves (a refused connection becomes a failed record)."""
        if n <= 0:
            return
        with contextlib.suppress(Exception):
            results = await asyncio.wait_for(
                asyncio.gather(*(self.open() for _ in range(n)), return_exceptions=True),
                PREWARM_TIMEOUT_S,
            )
            for conn in results:
                if isinstance(conn, Connection):
                    self.put(conn)

    async def close(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports report connection_lost


class Http1Transport:
    """Sends prepared requests over a :class:`Pool` to one endpoint (see the module doc).

    Made by :meth:`of` inside the running loop; :meth:`prepare` encodes a body before the
    clock starts, :meth:`prewarm` opens connections, :meth:`exchange` sends one request
    and waits for its complete response, :meth:`close` closes every connection.
    ``opened`` counts the TCP connections opened; ``stamp_source`` says where arrival
    stamps are taken.
    """

    stamp_source = "protocol"

    def __init__(self, endpoint: Endpoint, loop: asyncio.AbstractEventLoop) -> None:
        self.endpoint = endpoint
        self.pool = Pool(endpoint, loop)
        self._loop = loop

    @classmethod
    def of(cls, url: str, api_key: str | None, concurrency: int) -> Http1Transport:
        """A transport to ``url`` on the running loop (``concurrency``: one connection each)."""
        del concurrency  # the pool opens connections on demand, and prewarm opens them ahead
        return cls(Endpoint.of(url, api_key), asyncio.get_running_loop())

    @property
    def opened(self) -> int:
        """TCP connections opened so far."""
        return self.pool.opened

    def prepare(self, body: bytes) -> bytes:
        """The request's complete bytes, encoded now (before any clock starts)."""
        return self.endpoint.request(body)

    async def prewarm(self, n: int) -> None:
        """Open up to ``n`` connections before the clock starts."""
        await self.pool.prewarm(n)

    async def close(self) -> None:
        """Close every connection."""
        await self.pool.close()

    async def exchange(
        self, request: bytes, timeout_s: float, on_send: Callable[[], None]
    ) -> HttpResponse:
        """Send one prepared request and wait for the complete response (or its failure).

        ``on_send()`` is called just before the write (it stamps the send). A reused
        connection that the server had already closed (nothing received at all) is retried
        once on a fresh one. Raises ``asyncio.TimeoutError`` or ``OSError`` only when no
        connection could be opened; every other failure is in the response's ``end``.
        """
        pool, loop = self.pool, self._loop
        deadline = time.perf_counter() + timeout_s
        for attempt in range(2):
            conn = pool.idle()
            reused = conn is not None
            if conn is None:
                remaining = deadline - time.perf_counter()
                conn = await asyncio.wait_for(pool.open(), max(remaining, 0.0))
            resp = HttpResponse(loop)
            conn.response = resp
            on_send()
            conn.transport.write(request)  # type: ignore[union-attr]
            timer = loop.call_at(
                loop.time() + timeout_s,
                resp.finish,
                "timeout",
                f"no complete response within {timeout_s:g} s",
            )
            try:
                await resp.done
            finally:
                timer.cancel()
                if resp.end is None:  # cancelled: the connection is mid-response
                    resp.finish("cancelled")
                if resp.end == "complete" and resp.keep_alive and conn.alive:
                    pool.put(conn)
                else:
                    pool.drop(conn)
            if resp.end == "lost" and reused and attempt == 0:
                continue
            return resp
        return resp  # pragma: no cover  (the loop always returns)

"""An aiohttp transport for the kit's client, to weigh its own HTTP/1.1 transport against.

:class:`AiohttpTransport` implements :class:`speclib.measure.request_loop.Transport` with one
``aiohttp.ClientSession`` (connector limit = concurrency, connections opened before the
clock through the connector, request headers and bodies prepared before it). The send is
stamped, by default, when aiohttp reports the request headers sent (its
``on_request_headers_sent`` trace: the headers go out with the body), its best case;
``AiohttpTransport.stamp_before_post`` stamps before calling ``session.post`` instead,
as a typical aiohttp client does. Each body read is stamped with ``time.perf_counter()``
the moment ``readany()`` hands it over;
everything else (SSE parsing, dating events by reads, scheduling, records) is the kit's
code, so the fidelity benchmark compares the transports alone::

    run_requests_sync(..., transport=AiohttpTransport.of)
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp
from yarl import URL

from speclib.core.auth import auth_headers
from speclib.measure.http1 import DONE_GRACE_S, DONE_TAILS, ERROR_BODY_BYTES

__all__ = ["AiohttpTransport", "StreamedResponse"]

PREWARM_TIMEOUT_S = 10.0


@dataclass(eq=False)
class StreamedResponse:
    """One response as aiohttp delivered it (a :class:`speclib.measure.parse.FinishedResponse`)."""

    status: int | None = None
    t_headers: float | None = None
    body: bytearray = field(default_factory=bytearray)
    arrivals: list[tuple[int, float]] = field(default_factory=list)
    end: str | None = None
    detail: str = ""


class AiohttpTransport:
    """The kit's transport interface on aiohttp (see the module doc)."""

    stamp_source = "reader"

    def __init__(
        self, url: str, api_key: str | None, concurrency: int, *, late_stamp: bool = True
    ) -> None:
        self._late_stamp = late_stamp
        self._url = URL(url)
        if self._url.scheme not in ("http", "https") or not self._url.host:
            raise ValueError(f"`base_url` must be an http(s) URL, got {url!r}")
        self._ssl = ssl.create_default_context() if self._url.scheme == "https" else False
        self.opened = 0
        trace = aiohttp.TraceConfig()
        trace.on_connection_create_end.append(self._count)
        if late_stamp:
            trace.on_request_headers_sent.append(self._stamp)
        self._connector = aiohttp.TCPConnector(limit=concurrency, ssl=self._ssl)
        self._session = aiohttp.ClientSession(
            connector=self._connector,
            timeout=aiohttp.ClientTimeout(total=None),
            auto_decompress=False,
            trace_configs=[trace],
            skip_auto_headers=("User-Agent",),
        )
        self._headers = {
            "User-Agent": "speclib",
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
            **auth_headers(api_key),
        }

    @classmethod
    def of(cls, url: str, api_key: str | None, concurrency: int) -> AiohttpTransport:
        """A transport factory for :func:`speclib.measure.request_loop.run_requests`."""
        return cls(url, api_key, concurrency)

    @classmethod
    def stamp_before_post(cls, url: str, api_key: str | None, concurrency: int) -> AiohttpTransport:
        """A factory whose transport stamps the send before calling ``session.post``."""
        return cls(url, api_key, concurrency, late_stamp=False)

    @staticmethod
    async def _stamp(_session: Any, ctx: SimpleNamespace, _params: Any) -> None:
        ctx.trace_request_ctx.on_send()

    async def _count(self, *_: object) -> None:
        self.opened += 1

    def prepare(self, body: bytes) -> bytes:
        """Bodies are already bytes; headers were built once in ``__init__``."""
        return body

    async def prewarm(self, n: int) -> None:
        """Open ``n`` connections through the connector and put them in its pool."""
        if n <= 0:
            return
        loop = asyncio.get_running_loop()
        timeout = aiohttp.ClientTimeout(connect=PREWARM_TIMEOUT_S)

        async def one() -> aiohttp.connector.Connection:
            req = aiohttp.ClientRequest("POST", self._url, loop=loop)  # key as session.post
            return await self._connector.connect(req, [], timeout)

        results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
        for conn in results:
            if isinstance(conn, aiohttp.connector.Connection):
                self.opened += 1
                conn.release()

    async def close(self) -> None:
        """Close the session and its connections."""
        await self._session.close()

    async def exchange(
        self, request: bytes, timeout_s: float, on_send: Callable[[], None]
    ) -> StreamedResponse:
        """Post one body, stream the response into a :class:`StreamedResponse`."""
        for attempt in range(2):
            out = StreamedResponse()
            try:
                async with asyncio.timeout(timeout_s):
                    await self._post(request, on_send, out)
            except TimeoutError:
                out.end = "timeout"
            except aiohttp.ClientConnectorError:
                raise  # no connection: the caller records a connection failure
            except aiohttp.ClientPayloadError as exc:
                out.end, out.detail = "cut", f"{type(exc).__name__}: {exc}"
            except aiohttp.ServerDisconnectedError as exc:
                if out.status is None and attempt == 0:
                    continue  # a kept-alive connection the server had closed: retry once
                out.end, out.detail = ("lost" if out.status is None else "cut"), repr(exc)
            except aiohttp.ClientResponseError as exc:
                out.end, out.detail = "bad_http", f"not an HTTP response ({exc.message})"
            except aiohttp.ClientError as exc:
                out.end, out.detail = "lost", f"{type(exc).__name__}: {exc}"
            return out
        return out  # pragma: no cover

    async def _post(
        self, request: bytes, on_send: Callable[[], None], out: StreamedResponse
    ) -> None:
        ctx = None
        if self._late_stamp:
            ctx = SimpleNamespace(on_send=on_send)
        else:
            on_send()
        async with self._session.post(
            self._url, data=request, headers=self._headers, trace_request_ctx=ctx
        ) as resp:
            out.t_headers = time.perf_counter()
            out.status = resp.status
            content = resp.content
            if resp.status != 200:
                while len(out.body) < ERROR_BODY_BYTES and (data := await content.readany()):
                    out.body += data[: ERROR_BODY_BYTES - len(out.body)]
                out.end = "complete"
                return
            body, arrivals = out.body, out.arrivals
            while data := await content.readany():
                t = time.perf_counter()
                body += data
                arrivals.append((len(body), t))
                if body.endswith(DONE_TAILS) and not content.at_eof():
                    await self._after_done(resp)
                    break
            out.end = "complete"

    @staticmethod
    async def _after_done(resp: aiohttp.ClientResponse) -> None:
        """[DONE] is in, the framing's end is not: wait briefly, else drop the connection."""
        try:
            async with asyncio.timeout(DONE_GRACE_S):
                while await resp.content.readany():
                    pass
        except TimeoutError:
            resp.close()

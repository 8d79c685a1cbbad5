"""An HTTP/1.1 response read incrementally from a socket: status, headers, de-framed body.

:class:`HttpResponse` is fed each network read together with the ``perf_counter()`` stamp
the protocol took as it arrived; it de-frames the body (chunked, Content-Length or
until-close), keeps it with the stamp of every read, and resolves ``done`` when the
response is over, or failed. It never parses the body's content.
"""

from __future__ import annotations

import asyncio

__all__ = ["DONE_GRACE_S", "DONE_TAILS", "ERROR_BODY_BYTES", "HttpResponse"]

ERROR_BODY_BYTES = 4096  # a non-200 body is kept only up to this
MAX_HEADER_BYTES = 65536
DONE_TAILS = (b"data: [DONE]\n\n", b"data: [DONE]\r\n\r\n")
DONE_GRACE_S = 0.05  # after [DONE], how long to wait for the end of the HTTP framing

# response framing states
_HEAD, _CHUNKED, _LENGTH, _TO_EOF, _END = range(5)
_SIZE, _DATA, _CRLF, _TRAILER = range(4)


class HttpResponse:
    """An HTTP/1.1 response read incrementally: status, headers, de-framed body, stamps.

    ``arrivals`` pairs the body length after each network read with the read's
    ``perf_counter()`` stamp. ``end`` is None while the response is open, then one of
    ``complete`` (framing ended), ``cut`` (connection closed inside the body), ``lost``
    (closed before any byte of the response), ``bad_http`` or ``timeout``; ``done`` is
    resolved then. A non-200 body is kept only up to 4 KiB.
    """

    __slots__ = (
        "_chunk",
        "_grace",
        "_head",
        "_left",
        "_mode",
        "_raw",
        "arrivals",
        "body",
        "cap",
        "detail",
        "done",
        "end",
        "headers",
        "keep_alive",
        "received",
        "status",
        "t_headers",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.done: asyncio.Future[None] = loop.create_future()
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.t_headers: float | None = None
        self.body = bytearray()
        self.arrivals: list[tuple[int, float]] = []
        self.end: str | None = None
        self.detail = ""
        self.keep_alive = False
        self.received = 0
        self.cap: int | None = None
        self._head = bytearray()
        self._raw = bytearray()
        self._mode = _HEAD
        self._chunk = _SIZE
        self._left = 0
        self._grace: asyncio.TimerHandle | None = None

    def finish(self, end: str, detail: str = "") -> None:
        """End the response as ``end`` (the first end wins) and resolve ``done``."""
        if self._grace is not None:
            self._grace.cancel()
        if self.end is None:
            self.end, self.detail = end, detail
            if end != "complete":
                self.keep_alive = False
            if not self.done.done():
                self.done.set_result(None)

    def feed(self, data: bytes, t: float) -> None:
        """One network read, stamped ``t`` by the protocol before anything else."""
        self.received += len(data)
        while self._mode == _HEAD:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_HEADER_BYTES:
                    self.finish("bad_http", "response headers too large")
                return
            head, data = bytes(self._head[:end]), bytes(self._head[end + 4 :])
            self._head = bytearray()
            if not self._start(head, t):
                return
            if not data:
                return
        before = len(self.body)
        mode = self._mode
        if mode == _CHUNKED:
            self._feed_chunked(data)
        elif mode == _LENGTH:
            take = data[: self._left]
            self._left -= len(take)
            self._keep(take)
            if len(take) < len(data):
                self.keep_alive = False  # bytes after the body: do not reuse
            if self._left == 0:
                self._mode = _END
                self.finish("complete")
        elif mode == _TO_EOF:
            self._keep(data)
        elif data:
            self.keep_alive = False
        if len(self.body) > before:
            self.arrivals.append((len(self.body), t))
            if self.end is None and self._grace is None and self.body.endswith(DONE_TAILS):
                # [DONE] is in, the framing's end is not (yet): do not wait for it forever.
                self._grace = self.done.get_loop().call_later(DONE_GRACE_S, self._after_done)

    def _after_done(self) -> None:
        self._grace = None
        self.keep_alive = False  # the framing never ended: this connection is unusable
        self.finish("complete")

    def lost(self, exc: BaseException | None) -> None:
        """The connection closed (EOF or error)."""
        if self.end is not None:
            return
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "closed by the server"
        if self._mode == _TO_EOF:
            self._mode = _END
            self.finish("complete")
        elif self.received == 0:
            self.finish("lost", f"connection lost before any response ({why})")
        elif self._mode == _HEAD:
            self.finish("bad_http", f"connection lost inside the response headers ({why})")
        else:
            self.finish("cut", f"connection closed before the response ended ({why})")

    def _start(self, head: bytes, t: float) -> bool:
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/") or not code.isdigit():
            self.finish("bad_http", f"not an HTTP response: {lines[0][:80]!r}")
            return False
        status = int(code)
        if 100 <= status < 200:
            return True  # interim response: the real one follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        self.status, self.headers, self.t_headers = status, headers, t
        connection = headers.get("connection", "").lower()
        self.keep_alive = "close" not in connection and (
            version != b"HTTP/1.0" or "keep-alive" in connection
        )
        if status != 200:
            self.cap = ERROR_BODY_BYTES
        length = headers.get("content-length")
        if status in (204, 304) or length == "0":
            self._mode = _END
            self.finish("complete")
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = _CHUNKED
        elif length is not None and length.isdigit():
            self._mode, self._left = _LENGTH, int(length)
        else:
            self._mode, self.keep_alive = _TO_EOF, False
        return True

    def _keep(self, data: bytes | bytearray) -> None:
        cap = self.cap
        if cap is None:
            self.body += data
        elif len(self.body) < cap:
            self.body += data[: cap - len(self.body)]

    def _feed_chunked(self, data: bytes) -> None:
        raw = self._raw
        raw += data
        pos, n = 0, len(raw)
        while True:
            state = self._chunk
            if state == _DATA:
                take = min(n - pos, self._left)
                if take <= 0:
                    break
                self._keep(raw[pos : pos + take])
                pos += take
                self._left -= take
                if self._left:
                    break
                self._chunk = _CRLF
            elif state == _SIZE:
                eol = raw.find(b"\r\n", pos)
                if eol < 0:
                    break
                size_text = bytes(raw[pos:eol]).split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    self.finish("bad_http", f"bad chunk size {size_text[:20]!r}")
                    return
                pos = eol + 2
                self._chunk, self._left = (_TRAILER, 0) if size == 0 else (_DATA, size)
            elif state == _CRLF:
                if n - pos < 2:
                    break
                pos += 2
                self._chunk = _SIZE
            else:  # trailer lines, up to an empty one
                eol = raw.find(b"\r\n", pos)
                if eol < 0:
                    break
                empty, pos = eol == pos, eol + 2
                if empty:
                    if pos < n:
                        self.keep_alive = False
                    del raw[:]
                    self._mode = _END
                    self.finish("complete")
                    return
        del raw[:pos]

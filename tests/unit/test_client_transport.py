"""The client's own HTTP/1.1 transport against servers that misbehave in scripted ways.

:mod:`tests.unit.test_client` covers the client against the aiohttp stand-in; here a raw
socket server answers byte for byte, to pin down what aiohttp never does: a keep-alive
connection closed by the server between requests, a stream whose ``[DONE]`` arrives but
whose HTTP framing never ends, bodies framed by Content-Length or by closing the
connection, and TLS.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from speclib.core.records import RequestRecord, tpot_s, ttft_s
from speclib.measure import RequestSpec, RunOutcome, build_request_body, run_requests_sync
from tests.fakeserver import FakeServer, Script

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

Handler = Callable[[socket.socket, int], None]


def sse_body(n_tokens: int = 3, done: bool = True) -> bytes:
    events = [{"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]} for i in range(n_tokens)]
    events.append({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": n_tokens}})
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)


HEAD_CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def read_request(conn: socket.socket) -> bytes | None:
    """One request (headers and Content-Length body), or None when the client closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head


@contextlib.contextmanager
def raw_server(handler: Handler, tls: ssl.SSLContext | None = None) -> Iterator[int]:
    """A threaded TCP server on 127.0.0.1; ``handler(conn, n)`` serves the n-th connection."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        n = 0
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            if tls is not None:
                try:
                    conn = tls.wrap_socket(conn, server_side=True)
                except (ssl.SSLError, OSError):
                    conn.close()
                    continue
            threading.Thread(target=_guarded, args=(handler, conn, n), daemon=True).start()
            n += 1

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        thread.join(2)
        listener.close()


def _guarded(handler: Handler, conn: socket.socket, n: int) -> None:
    with contextlib.suppress(OSError), conn:
        handler(conn, n)


def send(url: str, n: int, **kwargs: object) -> tuple[list[RequestRecord], RunOutcome]:
    records: list[RequestRecord] = []
    specs = [
        RequestSpec(
            f"p{i}",
            0,
            None,
            build_request_body(
                model="m", messages=[{"role": "user", "content": f"p{i}"}], max_tokens=8
            ),
        )
        for i in range(n)
    ]
    kwargs.setdefault("concurrency", 1)
    outcome = run_requests_sync(
        base_url=url,
        specs=specs,
        sink=records.append,
        series="s",
        replicate=0,
        launch_id="L",
        **kwargs,
    )
    return sorted(records, key=lambda r: r.prompt_id), outcome


def test_one_connection_per_slot_is_reused_for_every_request() -> None:
    with FakeServer(default=Script(n_tokens=4, ttft_s=0.01, step_s=0.002)) as srv:
        records, outcome = send(srv.base_url, 12, concurrency=3)
    assert all(r.ok for r in records) and outcome.connections == 3
    assert (
        outcome.stamp_source == "protocol" and outcome.loop_lag_max_s >= outcome.loop_lag_p99_s >= 0
    )
    assert outcome.parse_lag_max_s >= 0 and outcome.queue_wait_max_s >= 0


def test_a_keep_alive_connection_closed_by_the_server_is_retried_once() -> None:
    def handler(conn: socket.socket, n: int) -> None:
        served = 0
        while read_request(conn) is not None:
            if n == 0 and served == 1:
                return  # the server dropped the idle connection as the next request arrived
            conn.sendall(HEAD_CHUNKED + chunked(sse_body()) + b"0\r\n\r\n")
            served += 1

    with raw_server(handler) as port:
        records, outcome = send(f"http://127.0.0.1:{port}", 3)
    assert [r.ok for r in records] == [True, True, True]
    assert outcome.connections == 2 and outcome.n_failed == 0


def test_done_without_the_end_of_the_framing_still_completes() -> None:
    def handler(conn: socket.socket, n: int) -> None:
        read_request(conn)
        conn.sendall(HEAD_CHUNKED + chunked(sse_body()))  # no terminating chunk
        time.sleep(5)

    with raw_server(handler) as port:
        t0 = time.perf_counter()
        records, outcome = send(f"http://127.0.0.1:{port}", 2, timeout_s=10)
    assert time.perf_counter() - t0 < 2
    assert all(r.ok and r.chunk_tokens == (1, 1, 1) for r in records)
    assert outcome.connections == 2  # such a connection is never reused


@pytest.mark.parametrize("framing", ["content-length", "until-close"])
def test_bodies_framed_by_length_or_by_closing_the_connection(framing: str) -> None:
    body = sse_body(4)

    def handler(conn: socket.socket, n: int) -> None:
        while read_request(conn) is not None:
            if framing == "content-length":
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            else:
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + body)
                return

    with raw_server(handler) as port:
        records, outcome = send(f"http://127.0.0.1:{port}", 3)
    assert all(r.ok and r.output_tokens == 4 and r.text == "t0 t1 t2 t3 " for r in records)
    assert outcome.connections == (1 if framing == "content-length" else 3)


def test_a_chunk_split_byte_by_byte_is_reassembled_and_dated_by_its_last_byte() -> None:
    def handler(conn: socket.socket, n: int) -> None:
        read_request(conn)
        conn.sendall(HEAD_CHUNKED)
        for byte in chunked(sse_body(2)) + b"0\r\n\r\n":
            conn.sendall(bytes([byte]))
            time.sleep(0.0005)

    with raw_server(handler) as port:
        [rec], _ = send(f"http://127.0.0.1:{port}", 1)
    assert rec.ok and rec.text == "t0 t1 " and rec.chunk_tokens == (1, 1)
    assert 0 < ttft_s(rec) < rec.chunk_offsets_s[1] <= rec.done_offset_s
    assert tpot_s(rec) is not None


def test_garbage_instead_of_http_is_a_failed_record() -> None:
    def handler(conn: socket.socket, n: int) -> None:
        read_request(conn)
        conn.sendall(b"SSH-2.0-OpenSSH\r\n\r\n")

    with raw_server(handler) as port:
        [rec], outcome = send(f"http://127.0.0.1:{port}", 1)
    assert not rec.ok and rec.extra["error_kind"] == "http" and "not an HTTP response" in rec.error
    assert outcome.n_failed == 1


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https_with_a_trusted_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))

    def handler(conn: socket.socket, n: int) -> None:
        while read_request(conn) is not None:
            conn.sendall(HEAD_CHUNKED + chunked(sse_body()) + b"0\r\n\r\n")

    with raw_server(handler, tls) as port:
        records, outcome = send(f"https://127.0.0.1:{port}", 2)
    assert all(r.ok for r in records) and outcome.connections == 1


def test_another_transport_plugs_in_behind_the_same_interface() -> None:
    from tests.benchmarks.aiohttp_transport import AiohttpTransport

    with FakeServer(default=Script(n_tokens=4, ttft_s=0.01, step_s=0.002)) as srv:
        records, outcome = send(srv.base_url, 6, concurrency=2, transport=AiohttpTransport.of)
    assert all(r.ok and r.chunk_tokens == (1, 1, 1, 1) for r in records)
    assert outcome.stamp_source == "reader" and outcome.connections == 2

"""Test helper: drive Debian's headless Chromium over the DevTools protocol (CDP).

Used by the report browser test only; not library code. :func:`open_page` starts
``/usr/bin/chromium`` (or ``$SPECLIB_CHROMIUM``) with a throw-away profile and
``--remote-debugging-port=0``, reads the port from ``DevToolsActivePort``, attaches to one
page target over a websocket (``websocket-client``) and records, while the page loads,
every console message, uncaught exception, browser log entry, network request and failed
request. :class:`Page` then evaluates JavaScript, takes screenshots (viewport or full page)
and prints to PDF. Nothing is downloaded: the browser is whatever the system provides.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

__all__ = ["BrowserError", "Page", "PageEvents", "find_chromium", "open_page"]

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-port=0",
)


class BrowserError(RuntimeError):
    """Chromium could not be started, or a DevTools command failed or timed out."""


def find_chromium() -> str | None:
    """Path of the Chromium binary: ``$SPECLIB_CHROMIUM``, else ``chromium`` on PATH."""
    explicit = os.environ.get("SPECLIB_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageEvents:
    """What the page did while it loaded (filled from CDP events)."""

    console: list[dict[str, Any]] = field(default_factory=list)  # type, text
    exceptions: list[str] = field(default_factory=list)
    log_entries: list[dict[str, Any]] = field(default_factory=list)  # level, source, text, url
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    failed_requests: list[dict[str, Any]] = field(default_factory=list)  # url, error

    @property
    def console_errors(self) -> list[str]:
        errs = [c["text"] for c in self.console if c["type"] in ("error", "assert")]
        errs += self.exceptions
        errs += [e["text"] for e in self.log_entries if e["level"] == "error"]
        return errs


class Page:
    """One page target of a running Chromium, driven over its flattened CDP session."""

    def __init__(self, ws: websocket.WebSocket, session_id: str, *, timeout_s: float) -> None:
        self._ws = ws
        self._session = session_id
        self._timeout = timeout_s
        self._next_id = 0
        self._pending: list[dict[str, Any]] = []
        self._request_urls: dict[str, str] = {}
        self.events = PageEvents()

    # ---------------------------------------------------------------- protocol
    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one CDP command to the page and return its result (raise on error)."""
        self._next_id += 1
        msg_id = self._next_id
        self._ws.send(
            json.dumps(
                {"id": msg_id, "method": method, "params": params or {}, "sessionId": self._session}
            )
        )
        deadline = time.monotonic() + self._timeout
        while True:
            msg = self._recv(deadline, f"reply to {method}")
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise BrowserError(f"{method} failed: {msg['error']}")
                return msg.get("result", {})
            self._handle_event(msg)

    def wait_for_event(self, method: str) -> dict[str, Any]:
        """Block until the page emits ``method`` (e.g. ``Page.loadEventFired``)."""
        for i, msg in enumerate(self._pending):
            if msg.get("method") == method:
                del self._pending[i]
                return msg.get("params", {})
        deadline = time.monotonic() + self._timeout
        while True:
            msg = self._recv(deadline, method)
            if msg.get("method") == method:
                return msg.get("params", {})
            self._handle_event(msg)

    def _recv(self, deadline: float, what: str) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BrowserError(
                f"timed out after {self._timeout:.0f} s waiting for {what}"
            ) from None
        self._ws.settimeout(left)
        try:
            return json.loads(self._ws.recv())
        except websocket.WebSocketTimeoutException:
            raise BrowserError(
                f"timed out after {self._timeout:.0f} s waiting for {what}"
            ) from None

    def _handle_event(self, msg: dict[str, Any]) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        ev = self.events
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"])
            ev.console.append({"type": p["type"], "text": text})
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            ev.exceptions.append(d.get("exception", {}).get("description") or d.get("text", ""))
        elif method == "Log.entryAdded":
            e = p["entry"]
            ev.log_entries.append({k: e.get(k) for k in ("level", "source", "text", "url")})
        elif method == "Network.requestWillBeSent":
            url = p["request"]["url"]
            self._request_urls[p["requestId"]] = url
            ev.requests.append(url)
        elif method == "Network.loadingFailed":
            url = self._request_urls.get(p["requestId"], "?")
            ev.failed_requests.append(
                {"url": url, "error": p.get("errorText"), "blocked": p.get("blockedReason")}
            )
        elif method == "Network.responseReceived":
            status = p["response"].get("status", 0)
            if status >= 400:
                ev.failed_requests.append(
                    {"url": p["response"]["url"], "error": f"HTTP {status}", "blocked": None}
                )
        elif method:
            self._pending.append(msg)

    # ---------------------------------------------------------------- page actions
    def evaluate(self, expression: str) -> Any:
        """Evaluate a JavaScript expression in the page; return its JSON value."""
        res = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in res:
            raise BrowserError(f"JavaScript failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def set_viewport(self, width: int, height: int) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def emulate_media(self, media: str) -> None:
        """``"print"`` or ``"screen"``: which CSS media the page is laid out for."""
        self.send("Emulation.setEmulatedMedia", {"media": media})

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        """Save a PNG of the viewport (or of the whole page) to ``path``."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params |= {
                "captureBeyondViewport": True,
                "clip": {
                    "x": 0,
                    "y": 0,
                    "width": size["width"],
                    "height": size["height"],
                    "scale": 1,
                },
            }
        data = self.send("Page.captureScreenshot", params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def print_pdf(self, path: Path) -> Path:
        """Print the page to an A4 PDF at ``path`` (as a browser's print dialog would)."""
        data = self.send(
            "Page.printToPDF", {"paperWidth": 8.27, "paperHeight": 11.69, "printBackground": True}
        )["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


def _read_port(profile: Path, proc: subprocess.Popen[bytes], deadline: float) -> tuple[int, str]:
    marker = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrowserError(
                f"chromium exited with code {proc.returncode} before DevTools was ready"
            )
        with contextlib.suppress(OSError, ValueError, IndexError):
            lines = marker.read_text().split()
            return int(lines[0]), lines[1]
        time.sleep(0.05)
    raise BrowserError("chromium did not write DevToolsActivePort in time")


@contextlib.contextmanager
def open_page(
    url: str,
    *,
    width: int = 1366,
    height: int = 768,
    timeout_s: float = 60.0,
    chromium: str | None = None,
) -> Iterator[Page]:
    """Start Chromium, load ``url`` in a ``width``×``height`` viewport, yield the page.

    Console, exception, log and network events are recorded from before navigation until
    the ``load`` event; Chromium and its profile are removed on exit.
    """
    binary = chromium or find_chromium()
    if not binary:
        raise BrowserError("no chromium found (apt-get install chromium, or set SPECLIB_CHROMIUM)")
    profile = Path(tempfile.mkdtemp(prefix="speclib-chromium-"))
    cmd = [
        binary,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "about:blank",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    ws = None
    try:
        port, path = _read_port(profile, proc, time.monotonic() + timeout_s)
        ws = websocket.create_connection(
            f"ws://127.0.0.1:{port}{path}", timeout=timeout_s, suppress_origin=True
        )
        ws.send(
            json.dumps({"id": 1, "method": "Target.createTarget", "params": {"url": "about:blank"}})
        )
        target = _reply(ws, 1)["targetId"]
        ws.send(
            json.dumps(
                {
                    "id": 2,
                    "method": "Target.attachToTarget",
                    "params": {"targetId": target, "flatten": True},
                }
            )
        )
        page = Page(ws, _reply(ws, 2)["sessionId"], timeout_s=timeout_s)
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.send(f"{domain}.enable")
        page.set_viewport(width, height)
        page.send("Page.navigate", {"url": url})
        page.wait_for_event("Page.loadEventFired")
        # Let decoding of embedded images and late console messages settle.
        page.evaluate("Promise.all([...document.images].map(i => i.decode().catch(() => 0)))")
        yield page
    finally:
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def _reply(ws: websocket.WebSocket, msg_id: int) -> dict[str, Any]:
    while True:
        msg = json.loads(ws.recv())
        if msg.get("id") == msg_id:
            if "error" in msg:
                raise BrowserError(f"DevTools command {msg_id} failed: {msg['error']}")
            return msg["result"]

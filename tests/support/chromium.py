"""Headless Chromium driven over the DevTools protocol (a pipe, no extra package), for the
world-graph page: open a file, wait until the page says it has drawn, read values from it, move
the mouse, take a screenshot; and a small PNG reader on zlib to check the screenshot.

Chromium is Debian's package ``chromium`` (``apt-get install -y chromium``; ``scripts/test.sh`` installs
it). The flags are the ones that work on this machine's closed network (no background
connections; no sandbox, as root).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe")


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium with one page. ``with Browser(path) as b: b.open(file); b.eval(js)``."""

    def __init__(self, chromium: str, size: tuple[int, int] = (1400, 900), timeout: float = 60,
                 flags: tuple[str, ...] = ()) -> None:
        self.size = size
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="wg-chromium-")
        # The browser reads commands on fd 3 and writes replies on fd 4 (--remote-debugging-pipe).
        # bash puts the pipe ends there (from fds >= 10, clear of 3 and 4): no preexec_fn, so no
        # fork handlers run in this process (lancedb warns about those).
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        far = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (cmd_r, out_w)]
        for fd in (cmd_r, out_w):
            os.close(fd)
        self._proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{far[0]} 4>&{far[1]} {far[0]}<&- {far[1]}>&-', chromium, *FLAGS, *flags,
             f"--user-data-dir={self._profile.name}", f"--window-size={size[0]},{size[1]}", "about:blank"],
            pass_fds=tuple(far), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in far:
            os.close(fd)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.console: list[str] = []
        target = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self._session = self.call("Target.attachToTarget", targetId=target["targetId"], flatten=True)["sessionId"]
        for domain in ("Page.enable", "Runtime.enable"):
            self.call(domain, session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=size[0], height=size[1],
                  deviceScaleFactor=1, mobile=False)

    # ------------------------------------------------------------------ protocol
    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self._session
        os.write(self._cmd_w, json.dumps(msg).encode("utf-8") + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})
            self._event(reply)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._out_r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._out_r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium exited (code {self._proc.poll()})")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return dict(json.loads(raw))

    def _event(self, msg: dict[str, Any]) -> None:
        self.events.append(msg)
        if msg.get("method") == "Runtime.consoleAPICalled":
            args = msg["params"].get("args") or []
            self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
        elif msg.get("method") == "Runtime.exceptionThrown":
            details = msg["params"]["exceptionDetails"]
            self.console.append("exception: " + str(details.get("exception", {}).get("description")
                                                     or details.get("text")))

    # ------------------------------------------------------------------ page
    def open(self, path: Path, fragment: str = "", ready: str = "document.body && document.body.dataset.ready === '1'",
             timeout: float | None = None) -> float:
        """Load a file and wait until ``ready`` is true; returns the seconds from navigation."""
        return self.open_url(path.resolve().as_uri() + (f"#{fragment}" if fragment else ""), ready, timeout)

    def open_url(self, url: str, ready: str, timeout: float | None = None) -> float:
        """Load ``url`` and wait until the expression ``ready`` is true; returns the seconds from navigation."""
        self.events.clear()
        # via about:blank: the same file with another #fragment would otherwise not reload
        self.call("Page.navigate", session=True, url="about:blank")
        t0 = time.perf_counter()
        self.call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + (timeout or self.timeout)
        while not self.eval(f"Boolean({ready})"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: not ready after {timeout or self.timeout}s; console: {self.console}")
            time.sleep(0.05)
        return time.perf_counter() - t0

    def eval(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def mouse_move(self, x: float, y: float) -> None:
        self.call("Input.dispatchMouseEvent", session=True, type="mouseMoved", x=x, y=y)

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", session=True, type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self, out: Path, clip: tuple[float, float, float, float] | None = None,
                   scale: float = 1.0) -> Path:
        """A PNG of the viewport, or of ``clip`` = (x, y, width, height) in CSS pixels, times ``scale``."""
        # Two animation frames first, so the canvas shows the last state the page drew.
        self.eval("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        params: dict[str, Any] = {"format": "png"}
        if clip is not None:
            params["clip"] = dict(zip(("x", "y", "width", "height"), clip), scale=scale)
        data = self.call("Page.captureScreenshot", session=True, **params)["data"]
        out.write_bytes(base64.b64decode(data))
        return out

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._cmd_w, self._out_r):
            os.close(fd)
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------- PNG
def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    raw = path.read_bytes()
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        raise AssertionError(f"{path} is not a PNG")
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(raw):
        length, kind = struct.unpack(">I4s", raw[pos:pos + 8])
        body = raw[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (2, 6) or interlace:
                raise AssertionError(f"unsupported PNG (depth {depth}, colour type {color}, interlace {interlace})")
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    data = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        filt, line = data[start], bytearray(data[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if filt == 1:
                line[i] = (line[i] + a) & 255
            elif filt == 2:
                line[i] = (line[i] + b) & 255
            elif filt == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line) if channels == 3 else bytes(v for j, v in enumerate(line) if j % 4 != 3))
        prev = line
    return width, height, rows


def png_stats(path: Path, region: tuple[int, int, int, int] | None = None) -> dict[str, Any]:
    """Distinct colours and non-white pixels of a PNG, or of ``region`` = (x0, y0, x1, y1)."""
    width, height, rows = png_pixels(path)
    x0, y0, x1, y1 = region or (0, 0, width, height)
    colours: dict[bytes, int] = {}
    non_white = 0
    for row in rows[y0:y1]:
        for x in range(x0, min(x1, width)):
            px = row[3 * x:3 * x + 3]
            colours[px] = colours.get(px, 0) + 1
            if px != b"\xff\xff\xff":
                non_white += 1
    return {"width": width, "height": height, "colours": colours, "non_white": non_white}

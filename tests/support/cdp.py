"""Drive real headless Chromium through the DevTools protocol: open a page, read it,
type into it and click it with the mouse, as an operator would.

Debian's ``chromium`` (installed by scripts/ensure-services.sh when missing), one
private profile per browser, its DevTools socket on a free loopback port; the
protocol spoken over tornado's websocket client (tornado comes with Flower).
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from tornado.websocket import WebSocketClientConnection, websocket_connect

from tests.support import services
from tests.support.processes import wait_for

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-address=127.0.0.1", "--window-size=1600,1600")
T = TypeVar("T")


def chromium() -> str:
    """Debian's chromium, installed by the set-up script when missing (never skipped)."""
    return services.installed_program("chromium")


class Browser:
    """One headless Chromium and its one tab."""

    def __init__(self, log: Path) -> None:
        self.profile = tempfile.TemporaryDirectory(prefix="recur-chromium-",
                                                   ignore_cleanup_errors=True)
        port = services.free_port()
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--remote-debugging-port={port}",
             f"--user-data-dir={self.profile.name}", "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.loop = asyncio.new_event_loop()
        self.ids = 0
        targets: list[dict[str, Any]] = []

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited: {log.read_text(errors='replace')[-2000:]}")
            try:
                found = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=2).json()
            except httpx.TransportError:
                return False
            targets[:] = [t for t in found if t.get("type") == "page"]
            return bool(targets)

        wait_for(listening, 60, "chromium's DevTools socket")
        url = targets[0]["webSocketDebuggerUrl"]
        self.ws: WebSocketClientConnection = self.run(lambda: websocket_connect(url))
        self.call("Page.enable")
        self.call("Network.enable")

    def run(self, start: Callable[[], Awaitable[T]]) -> T:
        """Await what ``start`` begins, on this browser's own event loop."""
        async def inside() -> T:
            return await start()

        return self.loop.run_until_complete(inside())

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (its error raised)."""
        self.ids += 1
        ident = self.ids
        message = json.dumps({"id": ident, "method": method, "params": params})
        self.run(lambda: self.ws.write_message(message))
        while True:
            raw = self.run(lambda: asyncio.wait_for(self.ws.read_message(), 30))
            if raw is None:
                raise RuntimeError("chromium closed the DevTools socket")
            reply = json.loads(raw)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    def login(self, user: str, password: str) -> None:
        """Send basic-auth credentials with every request of the tab."""
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.call("Network.setExtraHTTPHeaders", headers={"Authorization": f"Basic {token}"})

    def js(self, expression: str) -> Any:
        """The value of ``expression`` in the page."""
        reply = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def _loaded(self) -> bool:
        try:
            return bool(self.js("document.readyState === 'complete' "
                                "&& window.__recurOld === undefined"))
        except RuntimeError:  # the old document's context went away meanwhile
            return False

    def open(self, url: str) -> None:
        self.js("window.__recurOld = 1")
        self.call("Page.navigate", url=url)
        wait_for(self._loaded, 30, f"{url} to load", interval=0.1)

    def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element, then wait for the new page."""
        box = self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                      " if (!e) return null; e.scrollIntoView({block: 'center', inline: 'center'});"
                      " const r = e.getBoundingClientRect();"
                      " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        assert box is not None, f"nothing on the page matches {selector}"
        self.js("window.__recurOld = 1")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1],
                      button="left", clickCount=1)
        wait_for(self._loaded, 30, f"the page after clicking {selector}", interval=0.1)

    def type(self, selector: str, text: str) -> None:
        """Focus the element and type ``text`` into it."""
        assert self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                       " if (!e) return false; e.focus(); return true; })()"), selector
        self.call("Input.insertText", text=text)

    def close(self) -> None:
        self.ws.close()
        self.run(lambda: asyncio.sleep(0.1))  # lets the close frame go out
        self.loop.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        self.log.close()
        self.profile.cleanup()

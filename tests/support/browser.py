"""Headless Chromium for the browser tests, driven over the Chrome DevTools protocol: the ``browser`` fixture
(module scope: one Chromium per test module; tests/plugin/conftest.py registers it) and the few protocol calls a
test needs (`DevTools`; `first_page`: the browser's first tab, sized). Moved from tests/plugin/test_real_run.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest


def chromium_binary() -> str:
    """Debian's ``chromium``, installed with apt-get when missing and possible; otherwise skip, saying why."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(
            "headless Chromium is not installed and cannot be (needs root and apt-get): apt-get install chromium"
        )
    done = subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, text=True, timeout=1200)
    found = shutil.which("chromium")
    if done.returncode != 0 or not found:
        pytest.skip(f"apt-get install chromium failed (exit {done.returncode}): {done.stderr.strip()[-300:]}")
    return found


UNTIL_SLICE = 10.0
# Each waits for the next animation frame, or 50 ms when frames are not being drawn (a page in the background).
UNTIL_JS = """async (test, limit) => {
  const end = performance.now() + limit;
  for (;;) {
    let value = null;
    try { value = test(); } catch (e) { value = null; }
    if (value || performance.now() >= end) return value === undefined ? null : value;
    await new Promise(r => { requestAnimationFrame(() => r()); setTimeout(r, 50); });
  }
}"""


SETTLED_JS = """async (target, limit) => {
  const end = performance.now() + limit;
  const docs = () => [document, ...[...document.querySelectorAll('iframe')].map(f => {
    try { return f.contentDocument; } catch (e) { return null; } }).filter(d => d && d.body)];
  const ends = (a) => { const t = a.effect && a.effect.getComputedTiming(); return !t || t.endTime !== Infinity; };
  const label = (a) => a.animationName || a.transitionProperty || a.id || a.constructor.name;
  const running = (keep) => docs().flatMap(d => d.getAnimations().filter(a => a.playState === 'running' && keep(a)));
  const layout = () => {
    if (target) { const e = target(); if (!e) return 'no element';
      const r = e.getBoundingClientRect();
      return [r.x, r.y, r.width, r.height, e.scrollHeight, e.getElementsByTagName('*').length,
        e.innerText.length].join(); }
    return JSON.stringify(docs().map(d => [d.documentElement.scrollWidth, d.documentElement.scrollHeight,
      d.getElementsByTagName('*').length, d.body.innerText.length]));
  };
  const moving = () => {
    const why = running(ends).map(a => 'animation ' + label(a));
    for (const d of docs()) {
      if (d.readyState !== 'complete') why.push('document ' + d.readyState);
      if (d.fonts.status !== 'loaded') why.push('fonts ' + d.fonts.status);
      const images = [...d.images].filter(i => !i.complete).length;
      if (images) why.push(images + ' images loading');
    }
    return why;
  };
  const start = performance.now();
  let before = null, frames = 0;
  for (;;) {
    let now, why;
    try { now = layout(); why = moving(); } catch (e) { now = null; why = ['' + e]; }
    if (now === 'no element') why.push('the element is not there');
    if (!why.length && now === before)
      return {settled: true, ms: Math.round(performance.now() - start), frames,
              looping: [...new Set(running(a => !ends(a)).map(label))]};
    if (performance.now() >= end) return {settled: false, moving: why.length ? why : ['the layout kept changing']};
    before = now; frames += 1;
    await new Promise(r => { requestAnimationFrame(() => r()); setTimeout(r, 50); });
  }
}"""


class DevTools:
    """The few Chrome DevTools protocol calls a test needs, over one page's websocket."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            message = await self.ws.receive_json(timeout=120)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    async def js(self, expression: str) -> Any:
        answer = await self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression[:80]}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def until(self, expression: str, timeout: float = 120.0) -> Any:
        """The expression's value once truthy, tested in the page on every animation frame; TimeoutError after
        ``timeout`` seconds. One evaluation waits at most ``UNTIL_SLICE`` s (under the socket's 120 s), so a page
        that navigates meanwhile (its context destroyed, the call refused) is asked again in the new one."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, min(UNTIL_SLICE, deadline - time.monotonic()))
            try:
                value = await self.js(f"({UNTIL_JS})(() => ({expression}), {left * 1000:.0f})")
            except RuntimeError:  # the page is navigating: its old context is gone, the new one not there yet
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"never true: {expression}")

    async def settled(self, element: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the page is still: its fonts and images loaded, no transition or finite animation running
        (in the page or a same-origin frame), and the element's box (without one, the page's size and content) the
        same on two consecutive animation frames. Animations that never end (a spinner) are not waited for, only
        named in the answer. TimeoutError, saying what still moved, after ``timeout`` seconds."""
        target = f"() => ({element})" if element else "null"
        answer = await self.js(f"({SETTLED_JS})({target}, {timeout * 1000:.0f})")
        if not answer["settled"]:
            where = f" ({element})" if element else ""
            raise TimeoutError(f"the page never settled within {timeout:.0f} s{where}: {', '.join(answer['moving'])}")
        return dict(answer)

    async def screenshot(self, path: Path) -> Path:
        import base64

        shot = await self.call("Page.captureScreenshot", format="png")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@asynccontextmanager
async def first_page(devtools_http: str, width: int = 1280, height: int = 900) -> AsyncIterator[DevTools]:
    """The browser's first tab over the DevTools protocol, page events on, its viewport ``width`` x ``height``."""
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.get(f"{devtools_http}/json/list") as listed:
            [page] = [t for t in await listed.json() if t["type"] == "page"][:1]
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            tools = DevTools(ws)
            await tools.call("Page.enable")
            await tools.call(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
            yield tools


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Headless Chromium with the DevTools protocol on a local port; yields its HTTP endpoint."""
    binary = chromium_binary()
    profile = tmp_path_factory.mktemp("chromium")
    process = subprocess.Popen(
        [
            binary,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--window-size=1280,800",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 120
        while not port_file.exists() or not port_file.read_text().strip():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"chromium did not start its DevTools endpoint (exit {process.poll()})")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port_file.read_text().split()[0]}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

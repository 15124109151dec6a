"""/docs (Swagger UI) renders the API from the assets the fastapi-offline package ships:
a real ``worldgraph serve`` and headless Chromium with every host but the server unresolvable,
and no request leaves the server's origin. Needs Debian's ``chromium``; skips without it, except
under CI=true, where a missing browser fails."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.chromium import Browser, find_chromium
from tests.support.live_server import LiveServer

pytestmark = pytest.mark.slow
# every name resolves to nothing: a page that needs a CDN cannot get it
OFFLINE = ("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("docs")) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = find_chromium()
    if not chromium:
        message = "chromium not found: apt-get install -y chromium (.ci/run installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with Browser(chromium, size=(1400, 900), flags=OFFLINE) as b:
        b.call("Network.enable", session=True)
        yield b


def _requests(b: Browser) -> list[str]:
    return [e["params"]["request"]["url"] for e in b.events if e.get("method") == "Network.requestWillBeSent"]


def _outside(b: Browser, origin: str) -> list[str]:
    return [u for u in _requests(b) if not (u.startswith(origin + "/") or u.startswith(("data:", f"blob:{origin}/")))]


def test_the_page_names_no_other_host(server: LiveServer) -> None:
    html = httpx.get(server.url + "/docs", timeout=30).text
    assert "cdn." not in html and "https://" not in html, html
    assert "/static-offline-docs/" in html
    # no ReDoc page: it fetches its vendor's logo from a CDN
    assert httpx.get(server.url + "/redoc", timeout=30).status_code == 404


def test_swagger_ui_renders_every_operation_offline(server: LiveServer, browser: Browser) -> None:
    browser.open_url(f"{server.url}/docs", ready="document.querySelectorAll('.opblock').length > 5", timeout=60)
    paths = set(browser.eval("[...document.querySelectorAll('.opblock-summary-path')]"
                             ".map(e => e.getAttribute('data-path') || e.innerText)"))
    document = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    assert paths == set(document["paths"]), paths
    assert "Record agent runs" in browser.eval("document.body.innerText")
    assert _outside(browser, server.url) == []
    assert any(u.endswith("/static-offline-docs/swagger-ui-bundle.js") for u in _requests(browser))


def test_assets_come_from_the_package() -> None:
    import fastapi_offline

    static = Path(fastapi_offline.__file__).parent / "static"
    assert (static / "swagger-ui-bundle.js").stat().st_size > 100_000

"""The built documentation site in a real browser: `make docs-check`.

Serves ``site/`` (what ``make docs`` builds) on 127.0.0.1 from a thread of
this process and opens it in headless Chromium (Debian's chromium and
chromium-driver) through Selenium, as a reader would, checking three things:

- the index renders: its title, its heading and its navigation are there;
- search finds ``FastLoader``: Material's search, run in the page's own web
  worker over the built index, lists a result that names it;
- the API page shows its signature: the Reference entry of ``FastLoader``
  renders ``FastLoader(dataset, batch_size...``.

A screenshot of each page is kept in the output folder (``build/docs-check``
by default). Every wait is bounded; the server and the browser are always
stopped. Exit status 0 when all three hold, 1 otherwise (each failure named).

Not part of ``make test``; ``.ci/run`` runs it after the tests.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

WAIT_S = 30.0  # the most any one check waits for the page to show what it looks for
API_PAGE = "reference/loader.html"
API_ID = "fastdecode.loader.FastLoader"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site without a log line per request."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass


def serve(site: Path) -> http.server.ThreadingHTTPServer:
    """Starts a server of ``site`` on 127.0.0.1, on a free port, in a daemon thread."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def browser(width: int = 1280, height: int = 900) -> webdriver.Chrome:
    """Headless Chromium through Debian's chromedriver."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        raise SystemExit("docs-check: chromium and chromedriver are needed "
                         "(apt-get install chromium chromium-driver; make docs-check does it)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    chrome.set_page_load_timeout(WAIT_S)
    return chrome


def wait_for(what: str, found: Callable[[], object]) -> object:
    """Polls ``found`` until it returns something truthy, for at most WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while True:
        value = found()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {WAIT_S:.0f} s")
        time.sleep(0.2)


def check_index(chrome: webdriver.Chrome, base: str) -> str:
    """The index renders: title, heading and navigation."""
    chrome.get(f"{base}/index.html")
    heading = wait_for("the index's heading",
                       lambda: [h.text for h in chrome.find_elements(By.CSS_SELECTOR,
                                                                     ".md-content h1")])
    assert "fastdecode" in chrome.title, f"the index's title is {chrome.title!r}"
    links = chrome.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary a.md-nav__link")
    assert len(links) >= 10, f"the navigation shows {len(links)} links"
    return f"index renders: heading {heading[0]!r}, {len(links)} navigation links"


def check_search(chrome: webdriver.Chrome, base: str) -> str:
    """Search finds FastLoader: a result names it."""
    chrome.get(f"{base}/index.html?q=FastLoader")  # Material runs the query in ?q= on load
    items = wait_for("a search result",
                     lambda: chrome.find_elements(By.CSS_SELECTOR, ".md-search-result__item"))
    texts = [item.text for item in items]  # type: ignore[attr-defined]
    assert any("FastLoader" in text for text in texts), f"no result names FastLoader: {texts[:3]}"
    meta = chrome.find_element(By.CSS_SELECTOR, ".md-search-result__meta").text
    return f"search finds FastLoader: {meta}"


def check_api(chrome: webdriver.Chrome, base: str) -> str:
    """The API page shows FastLoader's signature."""
    chrome.get(f"{base}/{API_PAGE}#{API_ID}")
    heading = wait_for("FastLoader's entry",
                       lambda: chrome.find_elements(By.ID, API_ID))[0]  # type: ignore[index]
    entry = heading.find_element(By.XPATH, "./..")
    text = " ".join(entry.text.split())
    for expected in ("FastLoader(", "dataset", "batch_size", "num_workers", "resumable"):
        assert expected in text, f"the API page's FastLoader entry lacks {expected!r}"
    return "API page shows FastLoader(dataset, batch_size, ..., num_workers, ...)"


CHECKS = {"index": check_index, "search": check_search, "api": check_api}


def main(argv: list[str] | None = None) -> int:
    """Runs the three checks over a built site; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, nargs="?", default=Path("site"),
                        help="the built site (make docs)")
    parser.add_argument("--out", type=Path, default=Path("build/docs-check"),
                        help="where the screenshots go")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"docs-check: {args.site}/index.html is missing; run make docs first", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    server = serve(args.site)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    failures = []
    try:
        chrome = browser()
        try:
            for name, check in CHECKS.items():
                try:
                    print(f"docs-check: {check(chrome, base)}")
                except (AssertionError, WebDriverException) as exc:
                    failures.append(name)
                    print(f"docs-check: FAILED {name}: {exc}", file=sys.stderr)
                chrome.save_screenshot(str(args.out / f"{name}.png"))
        finally:
            chrome.quit()
    finally:
        server.shutdown()
        server.server_close()
    print(f"docs-check: screenshots in {args.out}/ ({', '.join(f'{n}.png' for n in CHECKS)})")
    if failures:
        print(f"docs-check: failed: {', '.join(failures)}", file=sys.stderr)
        return 1
    print("docs-check: the site renders, search finds FastLoader, the API page shows its signature")
    return 0


if __name__ == "__main__":
    sys.exit(main())

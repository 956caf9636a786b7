"""Checks that an HTML report is self-contained: statically (no tag or style refers to another
file or the network) and in headless Chromium (no JavaScript error, no request leaves the file,
every plotly figure drew)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

_URL_ATTRIBUTES = {"src", "href", "srcset", "action", "formaction", "data", "poster", "background"}
_LOCAL_SCHEMES = {"file", "data", "blob", "about"}


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.references: list[str] = []
        self.scripts: list[str] = []
        self._tag = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        for name, value in attrs:
            # An in-page anchor (#id) loads nothing; any other URL would.
            if name in _URL_ATTRIBUTES and value and not value.startswith("#"):
                self.references.append(f"<{tag} {name}={value}>")
        if tag == "script":
            self.scripts.append("")

    def handle_data(self, data: str) -> None:
        if self._tag == "script" and self.scripts:
            self.scripts[-1] += data
        elif self._tag == "style" and ("url(" in data or "@import" in data):
            self.references.append(f"<style> loads {data.strip()[:80]}")

    def handle_endtag(self, tag: str) -> None:
        self._tag = ""


def external_references(page: str) -> list[str]:
    """Every tag attribute or style rule of `page` that would make a browser load something."""
    parser = _References()
    parser.feed(page)
    return parser.references


def script_sizes(page: str) -> list[int]:
    """The length of each inline script, in page order."""
    parser = _References()
    parser.feed(page)
    return [len(s) for s in parser.scripts]


@dataclass
class BrowserResult:
    severe: list[str]  # console messages at level SEVERE (JavaScript errors among them)
    requests: list[str]  # every URL the page asked for (itself included)
    figures: int  # plotly figure divs
    drawn: int  # of those, the ones plotly drew an SVG into

    @property
    def external_requests(self) -> list[str]:
        return [url for url in self.requests if urlparse(url).scheme not in _LOCAL_SCHEMES]


@contextmanager
def headless_chromium(width: int = 1400, height: int = 3200) -> Iterator[webdriver.Chrome]:
    """Debian's chromium through its chromedriver; offline flags, a throwaway profile."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_path, "install Debian's chromium and chromium-driver"
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
        ):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
        try:
            yield driver
        finally:
            driver.quit()


def open_report(driver: webdriver.Chrome, path: Path) -> BrowserResult:
    """Load `path`, wait for plotly to draw, and collect errors and requests of that load."""
    driver.get("about:blank")
    driver.get_log("browser")  # reading a log empties it: only this page's entries remain
    driver.get_log("performance")
    driver.get(path.resolve().as_uri())
    drawn_script = (
        "return Array.from(document.querySelectorAll('.plotly-graph-div'))"
        ".filter(d => d.querySelector('svg.main-svg')).length"
    )
    figures = int(
        driver.execute_script("return document.querySelectorAll('.plotly-graph-div').length")
    )
    drawn = 0
    for _ in range(100):  # plotly draws synchronously on load; this only absorbs slowness
        drawn = int(driver.execute_script(drawn_script))
        if drawn == figures:
            break
        time.sleep(0.1)
    severe = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    requests = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requests.append(message["params"]["request"]["url"])
    return BrowserResult(severe=severe, requests=requests, figures=figures, drawn=drawn)

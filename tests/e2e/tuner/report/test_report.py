"""`autotune report` on a real (small) tuning run and `autotune perf --html`: every section is
there, the page loads nothing from outside the file, and headless Chromium renders it without
a JavaScript error (a screenshot of each is saved in the test's tmp dir)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from plotly.offline import get_plotlyjs
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.conftest import PROJECT_ROOT
from tests.e2e.conftest import SLOW_DIGITS_CONFIG, autotune
from tests.support.html_checks import (
    external_references,
    headless_chromium,
    open_report,
    script_sizes,
)
from tests.support.server_process import RunningServer
from tuner.report.cli import report_command
from tuner.report.render import SECTIONS

PLOTLY_BUNDLE = "* plotly.js v"


@pytest.fixture(scope="module")
def tuned(
    bundled_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A 3-trial tuning of digits (slowed on purpose, so the best config differs), then
    `autotune report reports` in the same folder: (folder, the report command's result)."""
    work = tmp_path_factory.mktemp("tuned")
    repository = work / "model_repository"
    shutil.copytree(bundled_repository / "digits", repository / "digits")
    (repository / "digits" / "config.pbtxt").write_text(SLOW_DIGITS_CONFIG)
    tuning = autotune(
        work,
        "--latency-p95",
        "20ms",
        "-m",
        "digits",
        "--model-repository",
        str(repository),
        "--trials",
        "3",
        "--precision",
        "fp32,int8",
        "--measurement-interval",
        "300",
        "--seed",
        "1",
        *("--remeasure-top", "2", "--remeasure-repeats", "1"),  # light: the page shows it
    )
    assert tuning.returncode == 0, tuning.stdout + tuning.stderr
    return work, autotune(work, "report", "reports")


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with headless_chromium() as driver:
        yield driver


def assert_self_contained(page: str) -> None:
    assert external_references(page) == []
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b[^>]*\b(src|href)=", page)
    bundles = [size for size in script_sizes(page) if size > 1_000_000]
    assert len(bundles) == 1, "plotly.js is inlined exactly once"
    assert page.count(PLOTLY_BUNDLE) == 1
    # plotly.js holds URL strings of its own; the rest of the page names none (a trial's error
    # message may name the local tuning server, which is no external resource either).
    rest = page.replace(get_plotlyjs(), "")
    urls = re.findall(r"\w+://[^\s\"'<>]*", rest)
    assert [u for u in urls if not re.match(r"https?://(127\.0\.0\.1|localhost)[:/]", u)] == []


def test_report_prints_the_summary_and_writes_one_html_file(
    tuned: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    work, result = tuned
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((work / "reports" / "digits" / "summary.json").read_text())
    out = result.stdout
    assert "digits: p95 <= 20 ms" in out
    assert "as written" in out and "best" in out
    assert "best / as written throughput" in out
    for change in summary["changes"]:
        assert f"{change['field']}: {change['old']} -> {change['new']}" in out
    assert "report: reports/report.html" in out
    assert [p.name for p in (work / "reports").glob("*.html")] == ["report.html"]


def test_report_html_holds_every_section_and_loads_nothing_external(
    tuned: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    work, _ = tuned
    page = (work / "reports" / "report.html").read_text()
    summary = json.loads((work / "reports" / "digits" / "summary.json").read_text())
    for name in SECTIONS:
        assert f'id="model-digits-{name}"' in page, name
    for title in (
        "Summary",
        "Throughput vs p95 latency",
        "Optimization history",
        "Parameter importances",
        "Latency breakdown: as written vs best",
        "Accuracy of the precision variants",
        "All trials",
    ):
        assert f"<h3>{title}</h3>" in page, title
    assert "p95 &lt;= 20 ms" in page and "CPU cores" in page
    # The config as written is measured with its own 40 ms queue delay, so it misses the budget
    # and cannot be the best: the report compares the best with it and lists the changes.
    as_written = summary["as_written"]
    assert as_written["number"] == 0 and as_written["outcome"]["latency_us"] > 20_000
    assert not as_written["feasible"] and summary["best"]["number"] != 0
    assert "for the configuration as written" in page
    assert summary["changes"], "the config as written cannot be the best"
    for change in summary["changes"]:
        assert f'<span class="new">{change["new"]}</span>' in page
    assert "Pareto front" in page and "best feasible so far" in page
    assert "budget p95 \\u003c= 20 ms" in page  # the budget line's label, in the figure JSON
    assert "importance for throughput" in page or "completed trials" in page
    assert "Compute infer" in page and "Client + network" in page
    accuracy = page.split('id="model-digits-accuracy"')[1].split("</section>")[0]
    assert "<td>fp32</td>" in accuracy and "<td>int8</td>" in accuracy
    assert "top1_agreement" in accuracy
    trials = page.split('id="model-digits-trials-table"')[1].split("</table>")[0]
    assert trials.count("<tr") == 1 + len(summary["trials"])
    assert trials.count("as written") == 1
    assert_self_contained(page)


def test_report_renders_in_headless_chromium_without_errors(
    tuned: tuple[Path, subprocess.CompletedProcess[str]],
    browser: webdriver.Chrome,
    tmp_path: Path,
) -> None:
    work, _ = tuned
    path = work / "reports" / "report.html"
    result = open_report(browser, path)
    assert result.severe == []
    assert result.requests, "the performance log saw the page load"
    assert result.external_requests == []
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert result.figures >= 3
    assert result.drawn == result.figures
    browser.save_screenshot(str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").stat().st_size > 10_000

    table = browser.find_element(By.ID, "model-digits-trials-table")
    header = table.find_element(By.XPATH, ".//th[text()='Infer/s']")
    column = [th.text for th in table.find_elements(By.TAG_NAME, "th")].index("Infer/s")

    def values() -> list[float]:
        rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
        texts = [row.find_elements(By.TAG_NAME, "td")[column].text for row in rows]
        return [float(t.replace(",", "")) for t in texts if t != "-"]

    header.click()
    assert values() == sorted(values())
    header.click()
    assert values() == sorted(values(), reverse=True)


def test_report_of_one_model_folder_and_of_a_folder_without_a_run(
    tuned: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    work, _ = tuned
    runner = CliRunner()
    output = tmp_path / "digits.html"
    single = runner.invoke(report_command, [str(work / "reports" / "digits"), "-o", str(output)])
    assert single.exit_code == 0, single.output
    assert 'id="model-digits-summary"' in output.read_text()

    (tmp_path / "empty").mkdir()
    empty = runner.invoke(report_command, [str(tmp_path / "empty")])
    assert empty.exit_code == 2
    assert "error: no summary.json in" in empty.output
    assert "Traceback" not in empty.output


def test_perf_html_shows_latency_throughput_and_the_server_breakdown(
    server: RunningServer, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    page_path = tmp_path / "perf.html"
    result = autotune(
        PROJECT_ROOT,
        "perf",
        "-m",
        "digits",
        "-u",
        server.url,
        "--concurrency-range",
        "1:3:2",
        "-p",
        "300",
        "-s",
        "50",
        "-r",
        "20",
        "--html",
        str(page_path),
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    page = page_path.read_text()
    for anchor in ("run", "throughput", "latency", "tradeoff", "breakdown", "table"):
        assert f'<section id="{anchor}">' in page, anchor
    assert "autotune perf: digits" in page and f"{server.url} (http)" in page
    assert "Server overhead" in page and '"name":"p99"' in page
    rows = page.split('<section id="table">')[1].split("</table>")[0]
    assert rows.count("<tr") == 1 + 2  # concurrency 1 and 3
    assert_self_contained(page)

    opened = open_report(browser, page_path)
    assert opened.severe == []
    assert opened.external_requests == []
    assert opened.figures == 4 and opened.drawn == 4
    browser.save_screenshot(str(tmp_path / "perf.png"))

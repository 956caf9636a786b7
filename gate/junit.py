"""The gate's outcome as JUnit XML: one testcase per model, load and metric."""

from __future__ import annotations

import platform
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

from common.atomic import write_text_atomic
from gate.gating import GateOutcome

SUITE = "autotune-perf-gate"


def junit_xml(outcome: GateOutcome, baseline_path: Path) -> str:
    """The XML document: one testsuite, one testcase per check (a regression is its failure),
    the baseline, tolerance, statistic and notes as its properties."""
    failures = len(outcome.regressions)
    counts = {"tests": str(len(outcome.checks)), "failures": str(failures), "errors": "0"}
    elapsed = f"{outcome.elapsed_s:.3f}"
    root = ET.Element("testsuites", {"name": SUITE, "time": elapsed, **counts})
    suite = ET.SubElement(
        root,
        "testsuite",
        {
            "name": SUITE,
            **counts,
            "skipped": "0",
            "time": elapsed,
            "timestamp": datetime.now().isoformat(timespec="seconds"),
            "hostname": platform.node() or "localhost",
        },
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("baseline", str(baseline_path)),
        ("tolerance", outcome.tolerance.describe()),
        ("statistic", outcome.compared()),
        *(("note", note) for note in outcome.notes),
    ):
        ET.SubElement(properties, "property", name=name, value=value)
    for check in outcome.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"{SUITE}.{check.model}",
            name=f"concurrency {check.concurrency}: {check.metric}",
            time=f"{outcome.seconds.get((check.model, check.concurrency), 0.0):.3f}",
        )
        if check.regressed:
            failure = ET.SubElement(
                case, "failure", message=check.describe(), type="PerformanceRegression"
            )
            failure.text = check.describe()
        ET.SubElement(case, "system-out").text = check.describe()
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: Path, outcome: GateOutcome, baseline_path: Path) -> None:
    """Write `junit_xml` to `path` atomically."""
    write_text_atomic(path, junit_xml(outcome, baseline_path))

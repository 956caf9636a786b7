"""The Prometheus text format (0.0.4) as Triton writes it.

prometheus_client's own writer names every counter family `<name>_total` in its HELP and TYPE
lines; Triton's counters have no such suffix (`nv_inference_request_success`), and dashboards
query those names, so the families are written here as they are named."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(text: str, quote: bool) -> str:
    text = text.replace("\\", r"\\").replace("\n", r"\n")
    return text.replace('"', r"\"") if quote else text


def _value(value: float) -> str:
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))  # counters read as integers, as Triton prints them
    return floatToGoString(value)


def _label_order(item: tuple[str, str]) -> tuple[bool, str]:
    return item[0] == "le", item[0]  # a histogram's `le` last, as Triton writes it


def render(families: Iterable[Metric]) -> bytes:
    """`families` in the text format, counters under their own names (no `_total`); b"" for none."""
    lines: list[str] = []
    for family in families:
        kind = "untyped" if family.type == "unknown" else family.type
        lines.append(f"# HELP {family.name} {_escape(family.documentation, quote=False)}")
        lines.append(f"# TYPE {family.name} {kind}")
        for sample in family.samples:
            labels = ",".join(
                f'{key}="{_escape(value, quote=True)}"'
                for key, value in sorted(sample.labels.items(), key=_label_order)
            )
            selector = f"{{{labels}}}" if labels else ""
            lines.append(f"{sample.name}{selector} {_value(sample.value)}")
    return ("\n".join(lines) + "\n").encode() if lines else b""

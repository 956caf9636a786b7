"""The text format as Triton writes it: family names as declared, escaped label values."""

from __future__ import annotations

import math

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from serve.metrics.exposition import render


def test_counter_family_keeps_its_name_and_values_print_as_integers() -> None:
    family = Metric("nv_inference_count", "Number of inferences performed", "counter")
    family.add_sample("nv_inference_count", {"version": "1", "model": "m"}, 12.0)
    assert render([family]) == (
        b"# HELP nv_inference_count Number of inferences performed\n"
        b"# TYPE nv_inference_count counter\n"
        b'nv_inference_count{model="m",version="1"} 12\n'
    )


def test_fractions_and_special_values() -> None:
    text = render(
        [
            GaugeMetricFamily("a", "fraction", value=0.25),
            GaugeMetricFamily("b", "not a number", value=math.nan),
            GaugeMetricFamily("c", "infinite", value=math.inf),
            GaugeMetricFamily("d", "huge", value=2.0**60),
        ]
    ).decode()
    assert "\na 0.25\n" in text
    assert "\nb NaN\n" in text
    assert "\nc +Inf\n" in text
    assert "\nd 1.152921504606847e+18\n" in text


def test_label_values_and_help_are_escaped_and_parse_back() -> None:
    family = Metric("m", 'help with a \\ and\na newline "quoted"', "gauge")
    family.add_sample("m", {"model": 'we"ird\\name\n'}, 1)
    text = render([family]).decode()
    assert 'm{model="we\\"ird\\\\name\\n"} 1' in text
    (parsed,) = text_string_to_metric_families(text)
    assert parsed.documentation == 'help with a \\ and\na newline "quoted"'
    assert parsed.samples[0].labels == {"model": 'we"ird\\name\n'}


def test_nothing_to_report_is_an_empty_body() -> None:
    assert render([]) == b""

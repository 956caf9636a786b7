"""Trace settings: parsing, the start-up flags, per-model overrides over the global ones,
clearing, counts; the trace file is chosen at start only."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.errors import ErrorKind, ServeError
from serve.trace.settings import TraceValues, parse_trace_config, parse_update
from serve.trace.tracer import Tracer


def test_defaults_are_tritons() -> None:
    assert Tracer().setting() == {
        "trace_file": [""],
        "trace_level": ["OFF"],
        "trace_rate": ["1000"],
        "trace_count": ["-1"],
        "log_frequency": ["0"],
        "trace_mode": ["triton"],
    }


def test_levels_parse_in_tritons_order() -> None:
    assert parse_update({"trace_level": ["TENSORS", "timestamps"]}) == {
        "level": ("TIMESTAMPS", "TENSORS")
    }
    assert parse_update({"trace_level": ["OFF"]}) == {"level": ()}


@pytest.mark.parametrize(
    ("update", "named"),
    [
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "trace_level"),
        ({"trace_level": ["LOUD"]}, "trace_level"),
        ({"trace_level": []}, "trace_level"),
        ({"trace_rate": ["0"]}, "trace_rate"),
        ({"trace_rate": ["often"]}, "trace_rate"),
        ({"trace_rate": ["1", "2"]}, "trace_rate"),
        ({"trace_count": ["-2"]}, "trace_count"),
        ({"log_frequency": ["-1"]}, "log_frequency"),
        ({"trace_mode": ["otel"]}, "trace_mode"),
        ({"trace_colour": ["red"]}, "trace_colour"),
    ],
)
def test_bad_settings_are_invalid_and_named(update: dict, named: str) -> None:
    with pytest.raises(ServeError) as caught:
        parse_update(update)
    assert caught.value.kind == ErrorKind.INVALID_ARGUMENT
    assert f"'{named}'" in caught.value.message


def test_opentelemetry_is_unsupported() -> None:
    with pytest.raises(ServeError) as caught:
        parse_update({"trace_mode": ["opentelemetry"]})
    assert caught.value.kind == ErrorKind.UNSUPPORTED


@pytest.mark.parametrize("file", ["/tmp/trace.json", "/etc/cron.d/job", ""])
def test_the_trace_file_cannot_be_set_through_the_api(file: str) -> None:
    """A client naming the file could make the server write any file it may write."""
    with pytest.raises(ServeError) as caught:
        parse_update({"trace_file": [file]})
    assert caught.value.kind == ErrorKind.UNSUPPORTED
    assert "--trace-config triton,file=PATH" in caught.value.message
    assert parse_update({"trace_file": None}) == {"file": None}  # clearing sets nothing


def test_trace_config_flags_set_the_global_defaults(tmp_path: Path) -> None:
    file = str(tmp_path / "trace.json")
    flags = [f"triton,file={file}", "level=TIMESTAMPS", "level=TENSORS", "rate=5", "count=9"]
    values = parse_trace_config([*flags, "triton,log-frequency=50", "mode=triton"])
    assert values == TraceValues(
        level=("TIMESTAMPS", "TENSORS"), rate=5, count=9, log_frequency=50, file=file
    )
    assert parse_trace_config([]) == TraceValues()
    assert parse_trace_config([f"file={file}"]).file == file


@pytest.mark.parametrize(
    ("specs", "problem"),
    [
        (["rate"], "expected [triton,]KEY=VALUE"),
        (["colour=red"], "expected [triton,]KEY=VALUE"),
        (["opentelemetry,url=x"], "unknown trace mode 'opentelemetry'"),
        (["rate=0"], "'trace_rate'"),
        (["level=LOUD"], "unknown level 'LOUD'"),
        (["file=/no/such/folder/t.json"], "does not exist"),
        (["level=TIMESTAMPS"], "needs a trace file"),
    ],
)
def test_bad_trace_config_flags_name_the_value(specs: list[str], problem: str) -> None:
    with pytest.raises(ValueError, match="--trace-config") as caught:
        parse_trace_config(specs)
    assert problem in str(caught.value)


def test_tracing_needs_a_file_and_a_bad_update_changes_nothing(tmp_path: Path) -> None:
    tracer = Tracer()
    with pytest.raises(ServeError, match="needs a trace file"):
        tracer.update("", {"trace_level": ["TIMESTAMPS"]})
    assert tracer.setting()["trace_level"] == ["OFF"]
    assert not tracer.active
    with pytest.raises(ServeError, match="'trace_rate'"):
        tracer.update("", {"trace_level": ["TIMESTAMPS"], "trace_rate": ["x"]})
    assert tracer.setting()["trace_level"] == ["OFF"]


def test_model_overrides_take_the_rest_from_global_and_clear_back(tmp_path: Path) -> None:
    file = str(tmp_path / "trace.json")
    tracer = Tracer(TraceValues(file=file))
    tracer.update("", {"trace_level": ["TIMESTAMPS"], "trace_rate": ["5"]})
    assert tracer.active
    model = tracer.update("simple", {"trace_rate": ["2"]})
    assert model["trace_rate"] == ["2"]
    assert model["trace_level"] == ["TIMESTAMPS"] and model["trace_file"] == [file]
    # a global change reaches what the model does not override
    tracer.update("", {"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": ["7"]})
    model = tracer.setting("simple")
    assert model["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    assert model["trace_rate"] == ["2"]
    # None clears the model's value back to the global one
    assert tracer.update("simple", {"trace_rate": None})["trace_rate"] == ["7"]
    assert tracer.setting("other") == tracer.setting()


def test_a_model_can_trace_while_global_is_off(tmp_path: Path) -> None:
    tracer = Tracer(TraceValues(file=str(tmp_path / "t.json")))
    tracer.update("", {"trace_rate": ["1"]})
    assert not tracer.active
    tracer.update("simple", {"trace_level": ["TIMESTAMPS"]})
    assert tracer.active
    assert tracer.sample("other") is None
    assert tracer.sample("simple") is not None
    tracer.update("simple", {"trace_level": None})
    assert not tracer.active


def test_rate_and_count_decide_which_requests_are_traced(tmp_path: Path) -> None:
    tracer = Tracer(TraceValues(file=str(tmp_path / "t.json")))
    tracer.update(
        "",
        {
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": ["3"],
            "trace_count": ["2"],
        },
    )
    sampled = [tracer.sample("m") is not None for _ in range(12)]
    assert sampled == [False, False, True, False, False, True] + [False] * 6
    assert tracer.setting()["trace_count"] == ["0"]
    assert not tracer.active  # the count is spent: the serving path stops asking

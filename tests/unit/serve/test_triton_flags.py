"""`autotune serve` takes every flag of tritonserver 2.51's `--help`, each with a value where
tritonserver wants one; a flag without effect here is parsed, and logged as such in one line
naming it, only when it asks for something this server does not do."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import click
import pytest

from serve.cli import (
    deprecated_trace_flags,
    deprecation_notices,
    parse_backend_config,
    serve_command,
)
from serve.triton_flags import IGNORED_FLAGS, recorded_notices
from tests.support.triton_peer import tritonserver_path

ROOT = Path(__file__).resolve().parents[3]
FLAGS_FILE = Path(__file__).parent / "data" / "tritonserver_2.51_flags.txt"


def _triton_flags(lines: list[str]) -> dict[str, bool]:
    """flag -> takes a value, from `--help` lines ("  --flag <type>")."""
    flags = {}
    for line in lines:
        match = re.match(r"^\s*(--[a-z0-9-]+)(\s+<.*>)?\s*$", line)
        if match:
            flags[match.group(1)] = match.group(2) is not None
    return flags


def _stored() -> dict[str, bool]:
    lines = FLAGS_FILE.read_text().splitlines()
    return _triton_flags([line for line in lines if not line.startswith("#")])


def _ours() -> dict[str, bool]:
    context = click.Context(serve_command)
    flags = {}
    for parameter in serve_command.get_params(context):
        if isinstance(parameter, click.Option):
            for name in (*parameter.opts, *parameter.secondary_opts):
                flags[name] = not parameter.is_flag
    return flags


def _parse(*args: str) -> click.Context:
    """The command line parsed as `autotune serve` parses it (the server is not started)."""
    return serve_command.make_context("serve", ["--model-repository", str(ROOT), *args])


def test_the_stored_list_is_tritonserver_2_51s() -> None:
    flags = _stored()
    assert len(flags) == 87
    assert {"--model-repository", "--backend-config", "--http-thread-count"} <= set(flags)
    assert flags["--disable-auto-complete-config"] is False and flags["--id"] is True


def test_the_stored_list_matches_the_installed_tritonserver() -> None:
    """Against the peer the test set-up installs (scripts/install_triton_peer.sh)."""
    peer = tritonserver_path()
    shown = subprocess.run([str(peer), "--help"], capture_output=True, text=True, timeout=60)
    assert _triton_flags((shown.stdout + shown.stderr).splitlines()) == _stored()


def test_every_tritonserver_flag_is_accepted_with_a_value_where_it_takes_one() -> None:
    ours = _ours()
    missing = sorted(set(_stored()) - set(ours))
    assert not missing, f"tritonserver flags autotune serve does not take: {missing}"
    arity = {name: takes for name, takes in _stored().items() if ours[name] != takes}
    assert not arity, f"flags whose value differs from tritonserver's (takes a value?): {arity}"


def test_a_flag_is_either_honoured_or_listed_as_without_effect_never_both() -> None:
    ignored = {flag.name for flag in IGNORED_FLAGS}
    honoured = {
        name
        for parameter in serve_command.params
        if isinstance(parameter, click.Option) and parameter.expose_value
        for name in parameter.opts
    }
    assert not ignored & honoured


def test_each_flag_without_effect_is_one_warning_naming_it() -> None:
    context = _parse(
        "--http-thread-count",
        "4",
        "--pinned-memory-pool-byte-size=268435456",
        "--cuda-memory-pool-byte-size",
        "0:67108864",
        "--grpc-infer-allocation-pool-size",
        "16",
        "--host-policy",
        "gpu0,numa-node=0",
    )
    notices = recorded_notices(context)
    assert len(notices) == 5
    for flag in (
        "--http-thread-count 4",
        "--pinned-memory-pool-byte-size 268435456",
        "--cuda-memory-pool-byte-size 0:67108864",
        "--grpc-infer-allocation-pool-size 16",
        "--host-policy gpu0,numa-node=0",
    ):
        assert sum(notice.startswith(f"{flag}: no effect here (") for notice in notices) == 1
    assert all("\n" not in notice for notice in notices)


def test_a_value_that_asks_for_what_we_do_anyway_is_quiet() -> None:
    context = _parse("--grpc-use-ssl", "false", "--allow-sagemaker=0")
    assert recorded_notices(context) == []


def test_a_repeatable_flag_warns_once_per_value() -> None:
    context = _parse("--cuda-memory-pool-byte-size", "0:1", "--cuda-memory-pool-byte-size", "1:2")
    assert len(recorded_notices(context)) == 1
    assert "0:1" in recorded_notices(context)[0] and "1:2" in recorded_notices(context)[0]


def test_a_bad_value_is_a_usage_error_naming_the_flag() -> None:
    with pytest.raises(click.BadParameter) as refused:
        _parse("--http-thread-count", "many")
    assert "--http-thread-count" in refused.value.format_message() or (
        refused.value.param is not None and "--http-thread-count" in refused.value.param.opts
    )


def test_repeated_model_repository_and_model_store_add_up(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    context = _parse("--model-store", str(other), "--model-repository", str(tmp_path))
    assert context.params["model_repository"] == (ROOT, other, tmp_path)


def test_exit_on_error_defaults_to_true_as_in_tritonserver() -> None:
    assert _parse().params["exit_on_error"] is True


def test_backend_config_settings_without_effect_are_each_named_in_a_warning() -> None:
    settings, notices = parse_backend_config(
        ("python,shm-default-byte-size=1048576", "tensorrt,coalesce-request-input=1")
    )
    assert settings == {}
    assert notices[0].startswith("--backend-config python,shm-default-byte-size=1048576: ")
    assert "'shm-default-byte-size' of backend 'python'" in notices[0]
    assert "'coalesce-request-input' of backend 'tensorrt'" in notices[1]


def test_default_max_batch_size_is_honoured_for_every_backend_or_onnxruntime() -> None:
    settings, notices = parse_backend_config(
        ("default-max-batch-size=8", "onnxruntime,default-max-batch-size=0")
    )
    assert settings == {
        "": {"default-max-batch-size": "8"},
        "onnxruntime": {"default-max-batch-size": "0"},
    }
    assert notices == []


@pytest.mark.parametrize(
    "spec", ["python", "python,=3", "onnxruntime,threads", "default-max-batch-size=many"]
)
def test_a_bad_backend_config_is_refused_naming_it(spec: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"--backend-config '{spec}'")):
        parse_backend_config((spec,))


def test_deprecated_trace_flags_stand_for_trace_config_values() -> None:
    specs = deprecated_trace_flags("/tmp/trace.json", ("TIMESTAMPS",), 10, 5, 2)
    assert specs == [
        "level=TIMESTAMPS",
        "triton,file=/tmp/trace.json",
        "rate=10",
        "count=5",
        "triton,log-frequency=2",
    ]


def test_a_deprecated_flag_honoured_is_named_with_what_replaces_it() -> None:
    context = _parse("--trace-rate", "5", "--response-cache-byte-size=1024")
    assert deprecation_notices(context) == [
        "--trace-rate is deprecated in tritonserver (honoured here): use --trace-config rate=N",
        "--response-cache-byte-size is deprecated in tritonserver (honoured here): use "
        "--cache-config local,size=N",
    ]
    assert deprecation_notices(_parse()) == []

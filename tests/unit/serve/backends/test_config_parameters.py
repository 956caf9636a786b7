"""One parser for the config `parameters` backends read: unset when absent or empty, integers
and flags parsed one way, and a value that does not parse is INVALID naming the config file,
the parameter and the value, whichever backend reads it."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.onnxruntime import session_options
from serve.backends.parameters import ConfigParameters
from serve.backends.pytorch_options import TorchOptions
from serve.errors import ErrorKind, ServeError


def _config(**values: str) -> mc.ModelConfig:
    text = "\n".join(
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
        for key, value in values.items()
    )
    return text_format.Parse(text, mc.ModelConfig())


def test_values_read_as_unset_integer_or_flag() -> None:
    params = ConfigParameters(_config(a="", b=" 4 ", c="On", d="no"), "m/config.pbtxt")
    assert params.text("a") is None and params.integer("a") is None and "a" in params
    assert params.text("missing") is None and "missing" not in params
    assert params.integer("b") == 4
    assert params.flag("c") is True and params.flag("d") is False and params.flag("a") is None


@pytest.mark.parametrize(
    ("key", "value", "read", "wanted"),
    [
        ("n", "four", lambda p: p.integer("n"), "an integer"),
        ("n", "-1", lambda p: p.integer("n", minimum=0), "an integer >= 0"),
        ("f", "maybe", lambda p: p.flag("f"), "true or false"),
    ],
)
def test_a_value_that_does_not_parse_is_invalid_naming_file_parameter_and_value(
    key: str, value: str, read: object, wanted: str
) -> None:
    params = ConfigParameters(_config(**{key: value}), "m/config.pbtxt")
    with pytest.raises(ServeError) as error:
        read(params)  # type: ignore[operator]
    assert error.value.kind is ErrorKind.INVALID_ARGUMENT
    assert str(error.value) == f"m/config.pbtxt: parameters['{key}']: '{value}' is not {wanted}"


def test_both_backends_answer_a_bad_thread_count_alike() -> None:
    source = "m/config.pbtxt"
    errors = []
    for config, read in (
        (_config(intra_op_thread_count="x"), lambda c: session_options(c, source)),
        (_config(INTRA_OP_THREAD_COUNT="x"), lambda c: TorchOptions.from_config(c, source)),
    ):
        with pytest.raises(ServeError) as error:
            read(config)
        errors.append((error.value.kind, str(error.value).split(": ")[0]))
    assert errors == [(ErrorKind.INVALID_ARGUMENT, source)] * 2

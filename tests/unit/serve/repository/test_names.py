"""Model names, load file paths and versions that could lead out of the repository are refused
with a message naming the problem; ordinary ones pass."""

from __future__ import annotations

import pytest

from serve.errors import ErrorKind, ServeError
from serve.repository.names import check_model_file, check_model_name, check_version


@pytest.mark.parametrize("name", ["simple", "digits_preprocess", "model-1.v2", "模型", "a b"])
def test_ordinary_model_names_pass(name: str) -> None:
    check_model_name(name)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "is empty"),
        (".", "'.' is not a model folder"),
        ("..", "'..' is not a model folder"),
        ("../outside", "holds a '/'"),
        ("/etc", "holds a '/'"),
        ("a/b", "holds a '/'"),
        ("a\0b", "a NUL character"),
        ("a\nb", "a control character (0x0a)"),
        ("..\\outside", "a backslash"),
        (".hidden", "starts with '.'"),
        ("x" * 256, "longer than 255 bytes"),
    ],
)
def test_names_leading_out_are_refused_naming_the_problem(name: str, problem: str) -> None:
    with pytest.raises(ServeError) as refused:
        check_model_name(name)
    assert refused.value.kind is ErrorKind.INVALID_ARGUMENT
    assert problem in refused.value.message
    assert "\0" not in refused.value.message and "\n" not in refused.value.message


@pytest.mark.parametrize("path", ["1/model.onnx", "config.pbtxt", "2/model.savedmodel/vars/x"])
def test_ordinary_model_files_pass(path: str) -> None:
    check_model_file("m", path)


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("", "is empty"),
        (".", "a '.' part"),
        ("..", "a '..' part"),
        ("1/../../x", "a '..' part"),
        ("./1/model.onnx", "a '.' part"),
        ("/etc/passwd", "is absolute"),
        ("1//model.onnx", "an empty part"),
        ("1/", "an empty part"),
        ("1/a\0b", "a NUL character"),
        ("1\\..\\x", "a backslash"),
    ],
)
def test_files_leading_out_are_refused_naming_the_model_and_path(path: str, problem: str) -> None:
    with pytest.raises(ServeError) as refused:
        check_model_file("m", path)
    assert refused.value.message.startswith("load of 'm': file path ")
    assert problem in refused.value.message


def test_versions_are_ascii_digits() -> None:
    assert check_version("3") == 3
    assert check_version("0012") == 12
    for bad in ("-1", " 1", "1_0", "+1", "\u0661", "1" * 20, "x"):
        with pytest.raises(ServeError) as refused:
            check_version(bad)
        assert "is not a version number" in refused.value.message

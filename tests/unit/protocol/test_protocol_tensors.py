"""The protocol's tables and tensor forms: datatypes, binary tensors, BYTES framing (checked
against tritonclient's), metadata, statistics fields; and that the package stays a leaf."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.utils as triton_utils

from protocol.datatypes import (
    ELEMENT_SIZE,
    WIRE_DTYPES,
    WIRE_TO_NUMPY,
    config_to_wire,
    numpy_dtype,
    wire_datatype,
    wire_to_config,
)
from protocol.errors import ProtocolError
from protocol.metadata import ModelMetadata, TensorMetadata
from protocol.statistics import BATCH_DURATION_FIELDS, DURATION_FIELDS
from protocol.tensors import (
    deserialize_bytes_tensor,
    serialize_bytes_tensor,
    split_bytes_elements,
    tensor_bytes,
)

ROOT = Path(__file__).resolve().parents[3]
OURS = ("serve", "analyzer", "tuner", "gate", "common", "tests")


def sample(datatype: str) -> np.ndarray:
    if datatype == "BYTES":
        return np.array([[b"a", b"", "\u00e9".encode()], [b"\x00\xff", b"xyz", b"q"]], dtype=object)
    return np.arange(6).astype(WIRE_TO_NUMPY[datatype]).reshape(2, 3)


def test_the_protocol_imports_nothing_else_of_ours() -> None:
    """Checked on every import statement, wherever it is (inside functions too)."""
    offenders = []
    for path in sorted((ROOT / "protocol").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else ["(relative)"]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                allowed = top in (
                    *("protocol", "numpy", "orjson", "httptools", "__future__"),
                    *("grpc", "google", "tritonclient"),  # the gRPC client and its protobufs
                )
                if not allowed and top not in sys.stdlib_module_names:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert offenders == []


def test_datatype_tables() -> None:
    assert set(WIRE_TO_NUMPY) == set(WIRE_DTYPES)
    for wire, dtype in WIRE_DTYPES.items():
        assert dtype.byteorder in ("<", "|"), wire
        assert dtype == WIRE_TO_NUMPY[wire].newbyteorder("<") or wire == "BYTES"
        if wire != "BYTES":
            assert ELEMENT_SIZE[wire] == dtype.itemsize
            assert wire_datatype(dtype) == wire
            assert wire_datatype(dtype.newbyteorder(">")) == wire
            assert np.dtype(triton_utils.triton_to_np_dtype(wire)) == dtype
    assert "BYTES" not in ELEMENT_SIZE
    assert (config_to_wire("TYPE_FP32"), config_to_wire("TYPE_STRING")) == ("FP32", "BYTES")
    assert (wire_to_config("FP32"), wire_to_config("BYTES")) == ("TYPE_FP32", "TYPE_STRING")
    assert wire_datatype(np.dtype("U3")) == wire_datatype(np.dtype(object)) == "BYTES"
    with pytest.raises(ProtocolError, match="unknown datatype 'BF16'"):
        numpy_dtype("BF16")
    with pytest.raises(ProtocolError, match="has no Triton datatype"):
        wire_datatype(np.dtype(np.complex64))


def test_tensor_bytes_is_little_endian_and_row_major() -> None:
    data = np.array([[1, 2], [3, 4]], dtype=">i4").T  # big-endian and not contiguous
    assert tensor_bytes("INT32", data) == np.array([1, 3, 2, 4], dtype="<i4").tobytes()
    assert tensor_bytes("BYTES", sample("BYTES")) == serialize_bytes_tensor(sample("BYTES"))


def test_bytes_helpers_match_tritonclient() -> None:
    array = sample("BYTES")
    ours = serialize_bytes_tensor(array)
    assert ours == triton_utils.serialize_byte_tensor(array).item()
    assert deserialize_bytes_tensor(ours, 6).tolist() == array.reshape(-1).tolist()
    assert deserialize_bytes_tensor(memoryview(ours), 6).tolist() == array.reshape(-1).tolist()
    assert serialize_bytes_tensor(np.array(["\u00e9", 5], dtype=np.object_)) == (
        b"\x02\x00\x00\x00\xc3\xa9\x01\x00\x00\x005"
    )
    assert serialize_bytes_tensor(np.empty((0,), dtype=np.object_)) == b""
    assert deserialize_bytes_tensor(b"", 0).shape == (0,)


@pytest.mark.parametrize(
    ("buffer", "count", "fragment"),
    [
        (b"\x01\x00\x00", 1, "truncated length prefix"),
        (b"\x05\x00\x00\x00ab", 1, "runs past"),
        (b"\x01\x00\x00\x00a", 2, "holds 1 elements"),
        (b"\x01\x00\x00\x00a\x00\x00\x00\x00", 1, "more than the 1"),
    ],
)
def test_deserialize_bytes_errors(buffer: bytes, count: int, fragment: str) -> None:
    with pytest.raises(ProtocolError) as info:
        deserialize_bytes_tensor(buffer, count, "input 'S'")
    assert "input 'S'" in str(info.value) and fragment in str(info.value)


def test_split_bytes_elements_takes_any_count() -> None:
    assert split_bytes_elements(b"\x01\x00\x00\x00a\x00\x00\x00\x00", "x") == [b"a", b""]
    assert split_bytes_elements(b"", "x") == []
    with pytest.raises(ProtocolError, match="x: truncated length prefix at byte 5 of 7"):
        split_bytes_elements(b"\x01\x00\x00\x00a\x00\x00", "x")


def test_model_metadata_round_trip_and_errors() -> None:
    document = {
        "name": "simple",
        "versions": ["1", 2],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]}],
    }
    metadata = ModelMetadata.from_json(document)
    assert metadata.inputs == [TensorMetadata("INPUT0", "INT32", [-1, 16])]
    assert metadata.versions == ["1", "2"]
    assert metadata.to_json() == {**document, "versions": ["1", "2"]}
    with pytest.raises(ProtocolError, match="has no 'name'"):
        ModelMetadata.from_json({"inputs": []})
    with pytest.raises(ProtocolError, match="model 'simple' has a malformed outputs entry"):
        ModelMetadata.from_json({**document, "outputs": [{"name": "x", "shape": [1]}]})


def test_statistics_fields_are_what_the_server_prints() -> None:
    from serve.backends.base import BatchTimes
    from serve.scheduler.statistics import ModelStatistics

    stats = ModelStatistics("m", "1")
    stats.record_execution(2, 10, 20, 30)
    stats.record_successes(2, 100, 10, BatchTimes(10, 20, 30))
    printed = stats.to_json()
    assert tuple(printed["inference_stats"]) == DURATION_FIELDS
    assert list(printed["batch_stats"][0]) == ["batch_size", *BATCH_DURATION_FIELDS]

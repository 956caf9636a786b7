"""Inputs read from and outputs written to shared memory around a request's completion."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from protocol.tensors import serialize_bytes_tensor
from serve.errors import ErrorKind, ServeError
from serve.inference import (
    InferRequest,
    InferResponse,
    OutputTensor,
    RegionSlice,
    RequestedOutput,
)
from serve.shared_memory.registry import SharedMemoryRegistry
from serve.shared_memory.tensors import bind_regions, output_region, uses_shared_memory

Result = InferResponse | ServeError


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[SharedMemoryRegistry]:
    (tmp_path / "in").write_bytes(bytes(256))
    (tmp_path / "out").write_bytes(bytes(256))
    registry = SharedMemoryRegistry(tmp_path)
    registry.register("in", "/in", 0, 256)
    registry.register("out", "/out", 0, 256)
    yield registry
    registry.close()


def region_request(
    inputs: dict[str, tuple[str, tuple[int, ...], RegionSlice]],
    outputs: dict[str, RegionSlice | None] | None = None,
) -> InferRequest:
    return InferRequest(
        model_name="m",
        model_version="",
        inputs={},
        input_datatypes={name: spec[0] for name, spec in inputs.items()},
        requested_outputs=None
        if outputs is None
        else [RequestedOutput(name, {}, where) for name, where in outputs.items()],
        region_inputs={name: (spec[1], spec[2]) for name, spec in inputs.items()},
    )


def test_inputs_are_copied_out_of_the_region(registry: SharedMemoryRegistry) -> None:
    values = np.arange(6, dtype=np.float32)
    registry.write(registry.acquire(RegionSlice("in", 8, 24), "x"), 8, values.tobytes(), "x")
    strings = serialize_bytes_tensor(np.array([b"ab", b""], dtype=np.object_))
    registry.write(registry.acquire(RegionSlice("in", 64, 10), "x"), 64, strings, "x")
    request = region_request(
        {
            "F": ("FP32", (2, 3), RegionSlice("in", 8, 24)),
            "S": ("BYTES", (2,), RegionSlice("in", 64, len(strings))),
        }
    )
    assert uses_shared_memory(request)
    bind_regions(registry, request, lambda result: None)

    assert request.region_inputs == {}
    np.testing.assert_array_equal(request.inputs["F"], values.reshape(2, 3))
    assert request.inputs["S"].tolist() == [b"ab", b""]
    registry.write(registry.acquire(RegionSlice("in", 8, 4), "x"), 8, b"\x00" * 4, "x")
    assert request.inputs["F"][0, 0] == values[0]  # a copy: later writes do not reach it


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (("INT32", (4,), RegionSlice("in", 0, 8)), "shared_memory_byte_size 8 does not match"),
        (("INT32", (2,), RegionSlice("in", 250, 8)), "runs past the end"),
        (("INT32", (2,), RegionSlice("gone", 0, 8)), "Unable to find system shared memory"),
        (("BYTES", (3,), RegionSlice("in", 0, 8)), "holds 2 elements but its shape needs 3"),
    ],
)
def test_bad_input_ranges_name_the_input(
    registry: SharedMemoryRegistry, spec: tuple[str, tuple[int, ...], RegionSlice], fragment: str
) -> None:
    with pytest.raises(ServeError) as info:
        bind_regions(registry, region_request({"IN": spec}), lambda result: None)
    assert fragment in info.value.message
    if spec[2].region != "gone":
        assert "input 'IN'" in info.value.message


def test_outputs_are_written_and_answered_without_data(
    registry: SharedMemoryRegistry, tmp_path: Path
) -> None:
    request = region_request({}, {"A": RegionSlice("out", 16, 16), "B": None})
    results: list[Result] = []
    complete, _ = bind_regions(registry, request, results.append)
    a = np.array([1, 2, 3, 4], dtype=np.int32)
    b = np.array([5], dtype=np.int32)
    complete(
        InferResponse("m", "1", [OutputTensor("A", "INT32", a), OutputTensor("B", "INT32", b)])
    )

    (response,) = results
    assert isinstance(response, InferResponse)
    assert [o.region for o in response.outputs] == [RegionSlice("out", 16, 16), None]
    assert (tmp_path / "out").read_bytes()[16:32] == a.tobytes()


def test_an_output_region_too_small_is_an_error_naming_output_and_sizes(
    registry: SharedMemoryRegistry,
) -> None:
    request = region_request({}, {"A": RegionSlice("out", 0, 8)})
    results: list[Result] = []
    complete, _ = bind_regions(registry, request, results.append)
    complete(InferResponse("m", "1", [OutputTensor("A", "INT32", np.zeros(4, np.int32))]))
    (error,) = results
    assert isinstance(error, ServeError)
    assert error.kind is ErrorKind.INVALID_ARGUMENT
    assert "output 'A' (8 bytes) should be at least 16 bytes" in error.message


def test_an_output_keeps_its_region_when_it_is_unregistered_in_flight(
    registry: SharedMemoryRegistry, tmp_path: Path
) -> None:
    request = region_request({}, {"A": RegionSlice("out", 0, 4)})
    results: list[Result] = []
    complete, _ = bind_regions(registry, request, results.append)
    registry.unregister("out")
    complete(InferResponse("m", "1", [OutputTensor("A", "INT32", np.array([7], np.int32))]))
    assert isinstance(results[0], InferResponse)
    assert (tmp_path / "out").read_bytes()[:4] == np.array([7], np.int32).tobytes()


def test_an_unknown_output_region_is_refused_before_queueing(
    registry: SharedMemoryRegistry, tmp_path: Path
) -> None:
    request = region_request({}, {"A": RegionSlice("out", 0, 4), "B": RegionSlice("nope", 0, 4)})
    with pytest.raises(ServeError, match="Unable to find system shared memory region: 'nope'"):
        bind_regions(registry, request, lambda result: None)
    registry.unregister("out")
    maps = Path("/proc/self/maps").read_text()
    assert str(tmp_path / "out") not in maps  # "A" was let go: nothing held the region


def test_output_region_cannot_be_classified() -> None:
    params = {"shared_memory_region": "o", "shared_memory_byte_size": 4, "classification": 2}
    with pytest.raises(ServeError, match="output 'A' can't set both"):
        output_region(params, "A")

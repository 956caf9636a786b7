"""The pytorch backend against small TorchScript models saved in tmp_path."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import BatchTimes, InstanceContext
from serve.errors import ErrorKind, ServeError
from serve.inference import InferRequest

pytest.importorskip("torch")

import torch

from serve.api import open_torchscript
from serve.backends.pytorch import PyTorchBackend, PyTorchInstance
from serve.backends.pytorch_options import TorchOptions
from serve.backends.torch_device import DeviceFeed

# torch 2.9+ deprecates TorchScript; Triton's pytorch backend serves it all the same.
pytestmark = pytest.mark.filterwarnings(r"ignore:`torch\.jit\.:DeprecationWarning")


class AddSub(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x - y


class DictOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"doubled": x * 2, "positives": (x > 0).sum(dim=1)}


class RejectNegative(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise ValueError("negative input")
        return x.sqrt()


class Widen(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double()


ADD_SUB_CONFIG = """
name: "addsub"
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""

ONE_IN_ONE_OUT = """
name: "{name}"
backend: "pytorch"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{extra}
"""


@pytest.fixture
def restore_torch_threads() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def make_instance(
    tmp_path: Path, module: torch.nn.Module | None, config_text: str
) -> PyTorchInstance:
    config = text_format.Parse(config_text, mc.ModelConfig())
    model_dir = tmp_path / config.name
    model_path = model_dir / "1" / "model.pt"
    model_path.parent.mkdir(parents=True)
    if isinstance(module, torch.jit.ScriptModule):
        torch.jit.save(module, str(model_path))
    elif module is not None:
        torch.jit.save(torch.jit.script(module), str(model_path))
    context = InstanceContext(
        model_name=config.name,
        model_version=1,
        repository_path=tmp_path,
        model_dir=model_dir,
        model_path=model_path,
        config=config,
        instance_name=f"{config.name}_0",
        instance_index=0,
    )
    instance = PyTorchBackend().create_instance(context)
    assert isinstance(instance, PyTorchInstance)
    return instance


def request(model: str, **inputs: np.ndarray) -> InferRequest:
    return InferRequest(model_name=model, model_version="", inputs=inputs)


def rows(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 4)).astype(np.float32)


def ok(result: dict[str, np.ndarray] | ServeError) -> dict[str, np.ndarray]:
    assert not isinstance(result, ServeError), result
    return result


@pytest.mark.parametrize("row_counts", [[2], [1, 3, 2]])
def test_tuple_outputs_follow_index_convention(tmp_path: Path, row_counts: list[int]) -> None:
    # The config lists INPUT__1 / OUTPUT__1 first: indices, not config order, decide.
    instance = make_instance(tmp_path, AddSub(), ADD_SUB_CONFIG)
    instance.load()
    xs = [rows(n, seed) for seed, n in enumerate(row_counts)]
    ys = [rows(n, seed + 10) for seed, n in enumerate(row_counts)]
    requests = [request("addsub", INPUT__0=x, INPUT__1=y) for x, y in zip(xs, ys, strict=True)]
    times = BatchTimes()
    results = instance.execute(requests, times)
    assert len(results) == len(requests)
    for x, y, result in zip(xs, ys, results, strict=True):
        outputs = ok(result)
        assert set(outputs) == {"OUTPUT__0", "OUTPUT__1"}
        np.testing.assert_allclose(outputs["OUTPUT__0"], x + y, rtol=1e-6)
        np.testing.assert_allclose(outputs["OUTPUT__1"], x - y, rtol=1e-6)
        assert outputs["OUTPUT__0"].dtype == np.float32
    assert times.compute_input_ns > 0
    assert times.compute_infer_ns > 0
    assert times.compute_output_ns > 0
    instance.unload()


def test_traced_model(tmp_path: Path) -> None:
    linear = torch.nn.Linear(4, 3).eval()
    traced = torch.jit.trace(linear, torch.zeros(1, 4))
    config = ONE_IN_ONE_OUT.format(name="linear", max_batch_size=8, extra="")
    instance = make_instance(tmp_path, traced, config)
    instance.load()
    xs = [rows(3, 1), rows(1, 2)]
    weight = linear.weight.detach().numpy()
    bias = linear.bias.detach().numpy()
    results = instance.execute([request("linear", INPUT__0=x) for x in xs], BatchTimes())
    for x, result in zip(xs, results, strict=True):
        np.testing.assert_allclose(ok(result)["OUTPUT__0"], x @ weight.T + bias, rtol=1e-5)


def test_inputs_by_forward_argument_names(tmp_path: Path) -> None:
    config = ADD_SUB_CONFIG.replace("INPUT__1", "y").replace("INPUT__0", "x")
    config = config.replace("OUTPUT__1", "sum").replace("OUTPUT__0", "difference")
    instance = make_instance(tmp_path, AddSub(), config)
    instance.load()
    x, y = rows(2, 1), rows(2, 2)
    outputs = ok(instance.execute([request("addsub", x=x, y=y)], BatchTimes())[0])
    # Names match forward()'s arguments, so x and y go by keyword; outputs map in config order.
    np.testing.assert_allclose(outputs["sum"], x + y, rtol=1e-6)
    np.testing.assert_allclose(outputs["difference"], x - y, rtol=1e-6)


def test_dict_outputs_map_by_key(tmp_path: Path) -> None:
    config = """
    name: "dictout"
    platform: "pytorch_libtorch"
    max_batch_size: 4
    input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [
      { name: "positives" data_type: TYPE_INT64 dims: [ 1 ] },
      { name: "doubled" data_type: TYPE_FP32 dims: [ 4 ] }
    ]
    """
    instance = make_instance(tmp_path, DictOut(), config)
    instance.load()
    xs = [rows(1, 3), rows(3, 4)]
    results = instance.execute([request("dictout", x=x) for x in xs], BatchTimes())
    for x, result in zip(xs, results, strict=True):
        outputs = ok(result)
        np.testing.assert_allclose(outputs["doubled"], x * 2)
        np.testing.assert_array_equal(outputs["positives"], (x > 0).sum(axis=1))
        assert outputs["positives"].dtype == np.int64


def test_forward_error_fails_every_request_in_the_batch(tmp_path: Path) -> None:
    config = ONE_IN_ONE_OUT.format(name="sqrt", max_batch_size=4, extra="")
    instance = make_instance(tmp_path, RejectNegative(), config)
    instance.load()
    good = np.abs(rows(2, 5))
    bad = -np.abs(rows(1, 6))
    results = instance.execute([request("sqrt", INPUT__0=good)] * 2, BatchTimes())
    for result in results:
        np.testing.assert_allclose(ok(result)["OUTPUT__0"], np.sqrt(good), rtol=1e-6)
    results = instance.execute(
        [request("sqrt", INPUT__0=good), request("sqrt", INPUT__0=bad)], BatchTimes()
    )
    for result in results:
        assert isinstance(result, ServeError)
        assert result.kind is ErrorKind.INTERNAL
        assert "negative input" in result.message
        assert "TorchScript interpreter" not in result.message


def test_unbatched_model_runs_each_request_alone(tmp_path: Path) -> None:
    config = ONE_IN_ONE_OUT.format(name="sqrt", max_batch_size=0, extra="")
    instance = make_instance(tmp_path, RejectNegative(), config)
    instance.load()
    first = np.array([1.0, 4.0], dtype=np.float32)
    second = np.array([9.0, 16.0, -1.0], dtype=np.float32)
    third = np.array([25.0], dtype=np.float32)
    results = instance.execute(
        [request("sqrt", INPUT__0=a) for a in (first, second, third)], BatchTimes()
    )
    np.testing.assert_allclose(ok(results[0])["OUTPUT__0"], [1.0, 2.0])
    assert isinstance(results[1], ServeError)
    np.testing.assert_allclose(ok(results[2])["OUTPUT__0"], [5.0])


def test_read_only_and_strided_inputs(tmp_path: Path) -> None:
    instance = make_instance(tmp_path, AddSub(), ADD_SUB_CONFIG)
    instance.load()
    x = np.frombuffer(rows(2, 7).tobytes(), dtype=np.float32).reshape(2, 4)
    y = rows(4, 8)[::2]
    assert not x.flags.writeable and not y.flags.c_contiguous
    outputs = ok(instance.execute([request("addsub", INPUT__0=x, INPUT__1=y)], BatchTimes())[0])
    np.testing.assert_allclose(outputs["OUTPUT__0"], x + y, rtol=1e-6)


def test_output_dtype_mismatch_names_the_output(tmp_path: Path) -> None:
    config = ONE_IN_ONE_OUT.format(name="widen", max_batch_size=4, extra="")
    instance = make_instance(tmp_path, Widen(), config)
    instance.load()
    (result,) = instance.execute([request("widen", INPUT__0=rows(1, 9))], BatchTimes())
    assert isinstance(result, ServeError)
    assert "OUTPUT__0" in result.message and "TYPE_FP64" in result.message


def test_missing_input_is_an_invalid_request(tmp_path: Path) -> None:
    instance = make_instance(tmp_path, AddSub(), ADD_SUB_CONFIG)
    instance.load()
    x = rows(1, 1)
    results = instance.execute(
        [request("addsub", INPUT__0=x), request("addsub", INPUT__0=x, INPUT__1=x)], BatchTimes()
    )
    assert isinstance(results[0], ServeError)
    assert results[0].kind is ErrorKind.INVALID_ARGUMENT and "INPUT__1" in results[0].message
    np.testing.assert_allclose(ok(results[1])["OUTPUT__0"], x + x)


def test_bad_model_file_is_unavailable_naming_the_file(tmp_path: Path) -> None:
    config = ONE_IN_ONE_OUT.format(name="broken", max_batch_size=4, extra="")
    instance = make_instance(tmp_path, None, config)
    with pytest.raises(ServeError) as missing:
        instance.load()
    assert missing.value.kind is ErrorKind.UNAVAILABLE
    assert "model.pt" in missing.value.message
    instance.context.model_path.write_bytes(b"not a TorchScript archive")
    with pytest.raises(ServeError) as corrupt:
        instance.load()
    assert corrupt.value.kind is ErrorKind.UNAVAILABLE
    assert str(instance.context.model_path) in corrupt.value.message


def test_input_count_must_fit_forward(tmp_path: Path) -> None:
    config = ONE_IN_ONE_OUT.format(name="addsub", max_batch_size=4, extra="")
    instance = make_instance(tmp_path, AddSub(), config)
    with pytest.raises(ServeError, match="forward"):
        instance.load()


def test_parameters_are_honoured(tmp_path: Path, restore_torch_threads: None) -> None:
    # The JIT modes and the inter-op pool are process-wide: ask for torch's current settings.
    interop = torch.get_num_interop_threads()
    extra = f"""
    parameters {{ key: "INTER_OP_THREAD_COUNT" value: {{ string_value: "{interop}" }} }}
    parameters {{ key: "ENABLE_JIT_EXECUTOR" value: {{ string_value: "true" }} }}
    parameters {{ key: "ENABLE_JIT_PROFILING" value: {{ string_value: "on" }} }}
    parameters {{ key: "INTRA_OP_THREAD_COUNT" value: {{ string_value: "2" }} }}
    parameters {{ key: "INFERENCE_MODE" value: {{ string_value: "false" }} }}
    parameters {{ key: "DISABLE_OPTIMIZED_EXECUTION" value: {{ string_value: "true" }} }}
    """
    config = ONE_IN_ONE_OUT.format(name="sqrt", max_batch_size=4, extra=extra)
    instance = make_instance(tmp_path, RejectNegative(), config)
    instance.load()
    assert torch.get_num_threads() == 2
    assert torch.get_num_interop_threads() == interop
    x = np.abs(rows(2, 1))
    (result,) = instance.execute([request("sqrt", INPUT__0=x)], BatchTimes())
    np.testing.assert_allclose(ok(result)["OUTPUT__0"], np.sqrt(x), rtol=1e-6)


def test_bad_parameter_value_names_the_parameter(tmp_path: Path) -> None:
    extra = 'parameters { key: "INFERENCE_MODE" value: { string_value: "maybe" } }'
    config = ONE_IN_ONE_OUT.format(name="sqrt", max_batch_size=4, extra=extra)
    instance = make_instance(tmp_path, RejectNegative(), config)
    with pytest.raises(ServeError, match=r"parameters\['INFERENCE_MODE'\]: 'maybe'") as error:
        instance.load()
    assert error.value.kind is ErrorKind.INVALID_ARGUMENT  # as every backend answers one


def test_gpu_parameters_are_read_and_the_ignored_ones_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    extra = """
    parameters { key: "DISABLE_CUDNN" value: { string_value: "true" } }
    parameters { key: "ENABLE_CACHE_CLEANING" value: { string_value: "true" } }
    parameters { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }
    parameters { key: "ENABLE_NVFUSER" value: { string_value: "true" } }
    parameters { key: "MY_OWN_SETTING" value: { string_value: "x" } }
    """
    config = ONE_IN_ONE_OUT.format(name="sqrt", max_batch_size=4, extra=extra)
    options = TorchOptions.from_config(text_format.Parse(config, mc.ModelConfig()), "config")
    assert options.cudnn is False and options.cache_cleaning is True
    instance = make_instance(tmp_path, RejectNegative(), config)
    with caplog.at_level(logging.WARNING, logger="serve.backends.pytorch"):
        instance.load()
    warned = "\n".join(record.getMessage() for record in caplog.records)
    for name in ("ENABLE_WEIGHT_SHARING", "ENABLE_NVFUSER"):
        assert f"sqrt_0: parameter {name}: " in warned and "ignored" in warned
    # On a CPU instance the GPU ones do nothing, and say so; a parameter Triton does not
    # know is the model's own business.
    assert "DISABLE_CUDNN has no effect on a CPU instance" in warned
    assert "ENABLE_CACHE_CLEANING has no effect on a CPU instance" in warned
    assert "MY_OWN_SETTING" not in warned
    x = np.abs(rows(2, 1))
    (result,) = instance.execute([request("sqrt", INPUT__0=x)], BatchTimes())
    np.testing.assert_allclose(ok(result)["OUTPUT__0"], np.sqrt(x), rtol=1e-6)


def test_a_runner_runs_the_model_as_the_backend_does(tmp_path: Path) -> None:
    module = torch.jit.script(AddSub())
    path = tmp_path / "model.pt"
    torch.jit.save(module, str(path))
    config = text_format.Parse(ADD_SUB_CONFIG, mc.ModelConfig())
    runner = open_torchscript(config, path)
    x, y = rows(3, 1), rows(3, 2)
    outputs = runner.run({"INPUT__0": x, "INPUT__1": y})
    runner.close()
    np.testing.assert_allclose(outputs["OUTPUT__0"], x + y, rtol=1e-6)
    np.testing.assert_allclose(outputs["OUTPUT__1"], x - y, rtol=1e-6)


def test_autocomplete_requires_declared_io() -> None:
    backend = PyTorchBackend()
    config = text_format.Parse(
        'name: "m" input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]', mc.ModelConfig()
    )
    with pytest.raises(ServeError) as error:
        backend.autocomplete(config, Path("model.pt"))
    assert error.value.kind is ErrorKind.INVALID_ARGUMENT
    assert "'output'" in error.value.message and "config.pbtxt" in error.value.message
    config.output.add(name="y", data_type=mc.TYPE_FP32, dims=[1])
    backend.autocomplete(config, Path("model.pt"))


def test_batches_through_a_device_feed_serve_as_without_one(tmp_path: Path) -> None:
    # A KIND_GPU instance moves its batches through a DeviceFeed (its stream, pinned buffers).
    # No GPU here: the same feed on the CPU, put in place of the one a GPU load makes, must
    # give every request its own rows back, batch after batch, as the plain path does.
    instance = make_instance(tmp_path, AddSub(), ADD_SUB_CONFIG)
    instance.load()
    feed = _CountingFeed("cpu", pin=False)
    instance._feed = feed
    for batch, row_counts in enumerate(([1, 3, 2], [2], [4, 4])):
        xs = [rows(n, 100 * batch + seed) for seed, n in enumerate(row_counts)]
        ys = [rows(n, 100 * batch + seed + 50) for seed, n in enumerate(row_counts)]
        requests = [request("addsub", INPUT__0=x, INPUT__1=y) for x, y in zip(xs, ys, strict=True)]
        results = instance.execute(requests, BatchTimes())
        for x, y, result in zip(xs, ys, results, strict=True):
            outputs = ok(result)
            np.testing.assert_allclose(outputs["OUTPUT__0"], x + y, rtol=1e-6)
            np.testing.assert_allclose(outputs["OUTPUT__1"], x - y, rtol=1e-6)
    arrays = instance.run_arrays({"INPUT__0": rows(2, 7), "INPUT__1": rows(2, 8)})
    np.testing.assert_allclose(arrays["OUTPUT__0"], rows(2, 7) + rows(2, 8), rtol=1e-6)
    assert (feed.uploads, feed.downloads) == (4 * 2, 4)  # every batch and run went through it
    instance.unload()


class _CountingFeed(DeviceFeed):
    def __init__(self, device: str, *, pin: bool) -> None:
        super().__init__(device, pin=pin)
        self.uploads = self.downloads = 0

    def upload(self, name: str, parts: Sequence[np.ndarray]) -> torch.Tensor:
        self.uploads += 1
        return super().upload(name, parts)

    def download(self, values: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
        self.downloads += 1
        return super().download(values)


class BFloat16Out(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.bfloat16)


def test_an_output_numpy_cannot_hold_names_the_output(tmp_path: Path) -> None:
    config = ONE_IN_ONE_OUT.format(name="bf16", max_batch_size=8, extra="")
    instance = make_instance(tmp_path, BFloat16Out(), config)
    instance.load()
    (result,) = instance.execute([request("bf16", INPUT__0=rows(2, 0))], BatchTimes())
    assert isinstance(result, ServeError) and result.kind is ErrorKind.INTERNAL
    assert "output 'OUTPUT__0' is torch.bfloat16" in str(result) and "TYPE_FP32" in str(result)

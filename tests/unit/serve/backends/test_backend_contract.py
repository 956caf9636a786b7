"""The backend contract (serve/backends/base.py), the same checks for every backend: a model
computing OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1 over [16] rows, opened as the
server opens it (serve.api.open_model_directory), loaded, run a batch at a time, unloaded.

- onnxruntime: the bundled `simple` (INT32);
- pytorch: a TorchScript equivalent scripted into tmp_path (INT32);
- python: the bundled `add_sub_py` (FP32), each instance a stub process.

Inputs reach a backend already checked (base.py: "Inputs were validated against the model
config"): the checks of bad input go through the engine's TensorChecker, as a request does, and
the request never reaches the instance. What only one backend does lives in its own file
(test_onnxruntime_backend.py, test_pytorch_backend.py, test_python_backend.py)."""

from __future__ import annotations

import gc
import shutil
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pytest

from serve.api import open_model_directory
from serve.backends.base import BatchTimes, InstanceContext, ModelInstance, RequestResult
from serve.backends.registry import get_backend
from serve.errors import ErrorKind, ServeError
from serve.inference import InferRequest, RequestedOutput
from serve.model.tensors import TensorChecker
from tests.conftest import BUNDLED_REPOSITORY

# torch 2.9+ deprecates TorchScript; Triton's pytorch backend serves it all the same.
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:`torch\.jit\.:DeprecationWarning"),
    pytest.mark.timeout(120),
]

ROW = 16


def _bundled(name: str) -> Callable[[Path], Path]:
    def build(root: Path) -> Path:
        return Path(shutil.copytree(BUNDLED_REPOSITORY / name, root / name))

    return build


def _torchscript_add_sub(root: Path) -> Path:
    torch = pytest.importorskip("torch")

    class AddSub(torch.nn.Module):
        def forward(
            self, INPUT0: torch.Tensor, INPUT1: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            return INPUT0 + INPUT1, INPUT0 - INPUT1

    model_dir = root / "add_sub_pt"
    (model_dir / "1").mkdir(parents=True)
    config = (BUNDLED_REPOSITORY / "simple" / "config.pbtxt").read_text()
    config = config.replace('name: "simple"', 'name: "add_sub_pt"')
    config = config.replace('platform: "onnxruntime_onnx"', 'platform: "pytorch_libtorch"')
    (model_dir / "config.pbtxt").write_text(config)
    torch.jit.save(torch.jit.script(AddSub()), str(model_dir / "1" / "model.pt"))
    return model_dir


def _runtime_object(attribute: str) -> Callable[[ModelInstance], Callable[[], bool]]:
    """What a loaded instance holds of its runtime (a session, a module), as a probe telling
    whether that object is still alive."""

    def hold(instance: ModelInstance) -> Callable[[], bool]:
        held = getattr(instance, attribute)
        assert held is not None, f"a loaded instance holds its {attribute}"
        ref = weakref.ref(held)
        del held
        return lambda: ref() is not None

    return hold


def _stub_process(instance: ModelInstance) -> Callable[[], bool]:
    pid = getattr(instance, "pid", None)
    assert pid is not None, "a loaded python instance has a stub process"
    process = psutil.Process(pid)
    return lambda: process.is_running() and process.status() != psutil.STATUS_ZOMBIE


@dataclass(frozen=True)
class AddSubModel:
    backend: str
    platforms: tuple[str, ...]
    model_filename: str
    dtype: type[np.generic]
    build: Callable[[Path], Path]  # writes the model folder under a root, returns it
    resource: Callable[[ModelInstance], Callable[[], bool]]  # is what load() took still held?


MODELS = {
    "onnxruntime": AddSubModel(
        "onnxruntime",
        ("onnxruntime_onnx",),
        "model.onnx",
        np.int32,
        _bundled("simple"),
        _runtime_object("_session"),
    ),
    "pytorch": AddSubModel(
        "pytorch",
        ("pytorch_libtorch",),
        "model.pt",
        np.int32,
        _torchscript_add_sub,
        _runtime_object("_module"),
    ),
    "python": AddSubModel(
        "python", (), "model.py", np.float32, _bundled("add_sub_py"), _stub_process
    ),
}


@dataclass
class Served:
    """One instance of the model and the checks the engine makes around it."""

    spec: AddSubModel
    instance: ModelInstance
    checker: TensorChecker

    def request(self, rows: int, seed: int, **extra: object) -> InferRequest:
        rng = np.random.default_rng(seed)
        a, b = (rng.integers(-100, 100, size=(rows, ROW)).astype(self.spec.dtype) for _ in "ab")
        return InferRequest(self.checker.model, "", {"INPUT0": a, "INPUT1": b}, **extra)

    def execute(self, requests: list[InferRequest], times: BatchTimes | None = None):
        for request in requests:
            self.checker.check_request(request)
        return self.instance.execute(requests, times or BatchTimes())


def ok(result: RequestResult) -> dict[str, np.ndarray]:
    assert not isinstance(result, ServeError), result
    return result


@pytest.fixture(params=list(MODELS))
def model(request: pytest.FixtureRequest) -> AddSubModel:
    return MODELS[request.param]


@pytest.fixture
def served(model: AddSubModel, tmp_path: Path) -> Iterator[Served]:
    directory = open_model_directory(model.build(tmp_path))
    version = directory.versions[-1]
    context = InstanceContext(
        model_name=directory.config.name,
        model_version=version,
        repository_path=tmp_path,
        model_dir=directory.path,
        model_path=directory.path / str(version) / directory.model_filename,
        config=directory.config,
        instance_name=f"{directory.config.name}_0",
        instance_index=0,
    )
    instance = get_backend(directory.backend).create_instance(context)
    instance.load()
    try:
        yield Served(model, instance, TensorChecker(directory.config, str(version)))
    finally:
        instance.unload()


def test_registered_backend_opens_the_model(model: AddSubModel, tmp_path: Path) -> None:
    directory = open_model_directory(model.build(tmp_path))
    assert directory.backend == model.backend
    assert directory.model_filename == model.model_filename
    backend = get_backend(model.backend)
    assert backend is get_backend(model.backend)
    assert (backend.name, backend.default_model_filename) == (model.backend, model.model_filename)
    assert backend.platforms == model.platforms


def test_a_batch_of_two_requests_is_split_per_request(served: Served) -> None:
    requests = [served.request(1, seed=1), served.request(3, seed=2)]
    times = BatchTimes()
    results = served.execute(requests, times)
    assert len(results) == len(requests)
    for request, result in zip(requests, results, strict=True):
        outputs = ok(result)
        a, b = request.inputs["INPUT0"], request.inputs["INPUT1"]
        assert {"OUTPUT0", "OUTPUT1"} <= set(outputs)
        for name, expected in (("OUTPUT0", a + b), ("OUTPUT1", a - b)):
            assert outputs[name].dtype == served.spec.dtype, name
            assert outputs[name].shape == a.shape, name
            np.testing.assert_array_equal(outputs[name], expected)
    assert times.compute_input_ns > 0
    assert times.compute_infer_ns > 0
    assert times.compute_output_ns > 0


def test_successive_batches_keep_serving(served: Served) -> None:
    for seed in range(3):
        (request,) = requests = [served.request(2, seed=seed)]
        (result,) = served.execute(requests)
        np.testing.assert_array_equal(
            ok(result)["OUTPUT1"], request.inputs["INPUT0"] - request.inputs["INPUT1"]
        )


def test_requested_outputs(served: Served) -> None:
    only_difference = served.request(2, seed=3, requested_outputs=[RequestedOutput("OUTPUT1")])
    every = served.request(1, seed=4)
    results = served.execute([only_difference, every])
    first = served.checker.make_response(only_difference, ok(results[0]))
    a, b = only_difference.inputs["INPUT0"], only_difference.inputs["INPUT1"]
    assert [(o.name, o.datatype) for o in first.outputs] == [
        ("OUTPUT1", "INT32" if served.spec.dtype is np.int32 else "FP32")
    ]
    np.testing.assert_array_equal(first.outputs[0].data, a - b)
    second = served.checker.make_response(every, ok(results[1]))
    assert [o.name for o in second.outputs] == ["OUTPUT0", "OUTPUT1"]
    a, b = every.inputs["INPUT0"], every.inputs["INPUT1"]
    np.testing.assert_array_equal(second.outputs[0].data, a + b)
    np.testing.assert_array_equal(second.outputs[1].data, a - b)


def _without_input1(request: InferRequest) -> None:
    del request.inputs["INPUT1"]


def _wrong_datatype(request: InferRequest) -> None:
    request.inputs["INPUT0"] = request.inputs["INPUT0"].astype(np.float64)


def _wrong_shape(request: InferRequest) -> None:
    request.inputs["INPUT1"] = request.inputs["INPUT1"][:, :15]


def _unknown_input(request: InferRequest) -> None:
    request.inputs["INPUT9"] = request.inputs["INPUT0"]


def _unknown_output(request: InferRequest) -> None:
    request.requested_outputs = [RequestedOutput("OUTPUT7")]


BAD_INPUTS = {
    "missing input": (_without_input1, "INPUT1"),
    "wrong datatype": (_wrong_datatype, "INPUT0"),
    "wrong shape": (_wrong_shape, "INPUT1"),
    "unknown input": (_unknown_input, "INPUT9"),
    "unknown output": (_unknown_output, "OUTPUT7"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_a_bad_input_is_invalid_naming_the_tensor(served: Served, case: str) -> None:
    spoil, tensor = BAD_INPUTS[case]
    bad = served.request(1, seed=5)
    spoil(bad)
    with pytest.raises(ServeError) as error:
        served.execute([served.request(1, seed=6), bad])
    assert error.value.kind is ErrorKind.INVALID_ARGUMENT
    assert f"'{tensor}'" in error.value.message
    good = served.request(2, seed=7)
    (result,) = served.execute([good])
    np.testing.assert_array_equal(
        ok(result)["OUTPUT0"], good.inputs["INPUT0"] + good.inputs["INPUT1"]
    )


def test_unload_releases_what_load_took(served: Served) -> None:
    held = served.spec.resource(served.instance)
    assert held()
    served.instance.unload()
    gc.collect()
    assert not held()
    served.instance.unload()  # a second unload (the fixture's) is harmless

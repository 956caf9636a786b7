"""Serving on a real NVIDIA GPU. Every test here needs one and skips, saying what is missing,
on a machine without it (the test machines of this project have none: `scripts/gpu_check.sh`
runs this module where a GPU is lent). What each test checks is what the CPU tests can only
check through stand-ins: NVML's view of the GPUs, GPU metrics, and models actually placed on a
GPU by each backend."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from serve.config.model_config import read_config_file
from serve.platform import detect_platform
from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import SERVE_BROKEN, serving
from tuner.precision import PrecisionVariant, prepare_variants
from tuner.precision.tensorrt_engine import build_engine

HERE = detect_platform()
needs_gpu = pytest.mark.skipif(not HERE.gpus, reason="no NVIDIA GPU visible (NVML found none)")
needs_ort_cuda = pytest.mark.skipif(
    not HERE.onnxruntime_cuda,
    reason="needs a GPU and onnxruntime-gpu (onnxruntime here has no CUDAExecutionProvider)",
)
needs_ort_tensorrt = pytest.mark.skipif(
    not HERE.onnxruntime_tensorrt,
    reason="needs a GPU and onnxruntime-gpu with its TensorrtExecutionProvider",
)


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


needs_torch_cuda = pytest.mark.skipif(
    not HERE.gpus or not _torch_cuda(), reason="needs a GPU and a CUDA build of torch"
)


@needs_gpu
def test_nvml_names_every_gpu_with_its_memory() -> None:
    for gpu in HERE.gpus:
        assert gpu.name and gpu.uuid.startswith("GPU-") and gpu.memory_total_bytes > 2**30
    assert "GPU 0:" in HERE.describe()


@needs_gpu
def test_gpu_metrics_are_served_per_gpu(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    shutil.copytree(BUNDLED_REPOSITORY / "simple", repository / "simple")
    with serving(repository, tmp_path / "server.log") as server:
        text = httpx.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    for gpu in HERE.gpus:
        total = re.search(
            rf'nv_gpu_memory_total_bytes{{gpu_uuid="{re.escape(gpu.uuid)}"}} (\S+)', text
        )
        assert total is not None, text[:2000]
        assert float(total.group(1)) == pytest.approx(gpu.memory_total_bytes)
        assert f'nv_gpu_utilization{{gpu_uuid="{gpu.uuid}"}}' in text


def _tensor_config(name: str, backend: str, group: str) -> str:
    return textwrap.dedent(
        f"""
        name: "{name}"
        backend: "{backend}"
        max_batch_size: 8
        input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
        output [
          {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
          {{ name: "PLACE" data_type: TYPE_FP32 dims: [ 2 ] }}
        ]
        instance_group [{group}]
        """
    )


def _infer(url: str, model: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    client = httpclient.InferenceServerClient(url)
    tensor = httpclient.InferInput("INPUT0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    result = client.infer(model, [tensor])
    return result.as_numpy("OUTPUT0"), result.as_numpy("PLACE")


@needs_torch_cuda
def test_a_torchscript_model_runs_on_the_gpu_of_its_instance(tmp_path: Path) -> None:
    import torch

    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            device = float(x.get_device()) if x.is_cuda else -1.0
            place = torch.full((x.shape[0], 2), device, device=x.device)
            place[:, 0] = float(x.is_cuda)
            return x * 2.0, place

    model_dir = tmp_path / "repository" / "double"
    (model_dir / "1").mkdir(parents=True)
    torch.jit.script(Double()).save(str(model_dir / "1" / "model.pt"))
    last = len(HERE.gpus) - 1
    group = f"{{ count: 1 kind: KIND_GPU gpus: [ {last} ] }}"
    (model_dir / "config.pbtxt").write_text(_tensor_config("double", "pytorch", group))
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    with serving(model_dir.parent, tmp_path / "server.log") as server:
        doubled, place = _infer(server.url, "double", rows)
    np.testing.assert_array_equal(doubled, rows * 2)
    assert place.tolist() == [[1.0, float(last)]] * 3  # on CUDA, on the GPU the group lists


@needs_gpu
def test_a_python_model_is_told_its_gpu(tmp_path: Path) -> None:
    model_dir = tmp_path / "repository" / "told"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            import triton_python_backend_utils as pb_utils

            class TritonPythonModel:
                def initialize(self, args):
                    on_gpu = args["model_instance_kind"] == "GPU"
                    self.place = [float(on_gpu), float(args["model_instance_device_id"])]

                def execute(self, requests):
                    responses = []
                    for request in requests:
                        x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                        place = np.tile(np.array(self.place, np.float32), (x.shape[0], 1))
                        responses.append(pb_utils.InferenceResponse([
                            pb_utils.Tensor("OUTPUT0", x * 2),
                            pb_utils.Tensor("PLACE", place),
                        ]))
                    return responses
            """
        )
    )
    group = "{ count: 1 kind: KIND_GPU }"  # one instance on each GPU
    (model_dir / "config.pbtxt").write_text(_tensor_config("told", "python", group))
    rows = np.ones((2, 4), dtype=np.float32)
    with serving(model_dir.parent, tmp_path / "server.log") as server:
        places = {tuple(_infer(server.url, "told", rows)[1][0]) for _ in range(4 * len(HERE.gpus))}
    assert all(on_gpu == 1.0 for on_gpu, _ in places)
    assert {device for _, device in places} <= {float(i) for i in HERE.gpu_ids}


@needs_gpu
def test_a_listed_gpu_the_machine_lacks_fails_only_that_model(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    shutil.copytree(BUNDLED_REPOSITORY / "simple", repository / "simple")
    shutil.copytree(BUNDLED_REPOSITORY / "simple", repository / "far")
    config = (repository / "far" / "config.pbtxt").read_text()
    config = re.sub(r'name: "simple"', 'name: "far"', config)
    config = re.sub(r"instance_group\s*\[[^\]]*\]", "", config)
    missing = len(HERE.gpus) + 3
    config += f"\ninstance_group [{{ kind: KIND_GPU gpus: [ {missing} ] }}]\n"
    (repository / "far" / "config.pbtxt").write_text(config)
    with serving(
        repository, tmp_path / "server.log", "--strict-readiness", "false", *SERVE_BROKEN
    ) as server:
        index = {
            m["name"]: m
            for m in httpclient.InferenceServerClient(server.url).get_model_repository_index()
        }
    assert index["simple"]["state"] == "READY"
    assert index["far"]["state"] == "UNAVAILABLE"
    assert f"instance_group[0].gpus lists [{missing}]" in index["far"]["reason"]


def _digits_on(tmp_path: Path, extra: str) -> Path:
    repository = tmp_path / "repository"
    shutil.copytree(BUNDLED_REPOSITORY / "digits", repository / "digits")
    config_path = repository / "digits" / "config.pbtxt"
    config = re.sub(r"instance_group\s*\[[^\]]*\]", "", config_path.read_text())
    config_path.write_text(config + "\ninstance_group [{ count: 1 kind: KIND_GPU }]\n" + extra)
    return repository


def _digits_logits(url: str, images: np.ndarray) -> np.ndarray:
    client = httpclient.InferenceServerClient(url)
    tensor = httpclient.InferInput("input", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images)
    return client.infer("digits", [tensor]).as_numpy("logits")


def _cpu_logits(images: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(BUNDLED_REPOSITORY / "digits" / "1" / "model.onnx"),
        providers=["CPUExecutionProvider"],
    )
    return session.run(["logits"], {"input": images})[0]


@needs_ort_cuda
def test_onnxruntime_on_cuda_matches_the_cpu(tmp_path: Path) -> None:
    images = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
    with serving(_digits_on(tmp_path, ""), tmp_path / "server.log") as server:
        logits = _digits_logits(server.url, images)
    np.testing.assert_allclose(logits, _cpu_logits(images), rtol=1e-3, atol=1e-4)


@needs_ort_tensorrt
def test_tensorrt_fp16_keeps_the_top_class_and_caches_its_engine(tmp_path: Path) -> None:
    accelerator = textwrap.dedent(
        f"""
        optimization {{ execution_accelerators {{ gpu_execution_accelerator [
          {{ name: "tensorrt" parameters [
            {{ key: "precision_mode" value: "FP16" }},
            {{ key: "trt_engine_cache_path" value: "{tmp_path / "engines"}" }}
          ] }}
        ] }} }}
        """
    )
    images = np.random.default_rng(1).random((8, 1, 8, 8), dtype=np.float32)
    with serving(_digits_on(tmp_path, accelerator), tmp_path / "server.log") as server:
        logits = _digits_logits(server.url, images)
    assert (logits.argmax(1) == _cpu_logits(images).argmax(1)).mean() >= 0.875
    assert any((tmp_path / "engines").iterdir()), "no TensorRT engine was cached"


needs_tensorrt = pytest.mark.skipif(
    not HERE.gpus or HERE.tensorrt_version is None or not _torch_cuda(),
    reason="needs a GPU, the tensorrt package and a CUDA build of torch",
)


def _build_digits_plan(target: Path) -> None:
    """digits' ONNX file as an FP16 TensorRT engine, batch 1..16, by the tuner's builder."""
    config = read_config_file(BUNDLED_REPOSITORY / "digits" / "config.pbtxt")
    source = BUNDLED_REPOSITORY / "digits" / "1" / "model.onnx"
    build_engine(source, target, "plan_fp16", config, 16)


@needs_tensorrt
def test_a_tensorrt_engine_is_served_with_its_config_completed(tmp_path: Path) -> None:
    model_dir = tmp_path / "repository" / "digits_plan"
    (model_dir / "1").mkdir(parents=True)
    _build_digits_plan(model_dir / "1" / "model.plan")
    (model_dir / "config.pbtxt").write_text('name: "digits_plan" platform: "tensorrt_plan"\n')
    images = np.random.default_rng(2).random((4, 1, 8, 8), dtype=np.float32)
    with serving(model_dir.parent, tmp_path / "server.log") as server:
        client = httpclient.InferenceServerClient(server.url)
        config = client.get_model_config("digits_plan")
        tensor = httpclient.InferInput("input", list(images.shape), "FP32")
        tensor.set_data_from_numpy(images)
        logits = client.infer("digits_plan", [tensor]).as_numpy("logits")
        too_big = httpclient.InferInput("input", [17, 1, 8, 8], "FP32")
        too_big.set_data_from_numpy(np.zeros((17, 1, 8, 8), np.float32))
        with pytest.raises(Exception, match=r"max_batch_size|profile"):
            client.infer("digits_plan", [too_big])
    assert config["max_batch_size"] == 16 and config["backend"] == "tensorrt"
    np.testing.assert_allclose(logits, _cpu_logits(images), rtol=1e-2, atol=1e-3)


@needs_tensorrt
def test_the_tuner_builds_engines_that_pass_the_accuracy_guard(tmp_path: Path) -> None:
    model_dir = BUNDLED_REPOSITORY / "digits"
    config = read_config_file(model_dir / "config.pbtxt")
    source = model_dir / "1" / "model.onnx"

    def prepare() -> list[PrecisionVariant]:
        return prepare_variants(
            model_dir,
            config,
            source,
            ["plan_fp16", "plan_int8"],
            0.05,
            None,
            tmp_path,
            engine_max_batch=64,
        )

    variants = prepare()
    for variant in variants:
        assert variant.usable, variant.verdict
        assert variant.model_path is not None and variant.model_path.suffix == ".plan"
        print(f"{variant.verdict}; built in {variant.build_seconds:.1f} s; {variant.method}")
    assert all(v.cached for v in prepare())


@needs_torch_cuda
def test_the_tuner_offers_gpu_instances_to_torchscript_and_python_models() -> None:
    from tuner.space import Platform

    assert {"pytorch", "python"} <= Platform.detect().gpu_backends


@needs_torch_cuda
def test_torchscript_fp16_and_bf16_modules_are_checked_and_served_on_the_gpu(
    tmp_path: Path,
) -> None:
    import torch

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))

    model_dir = tmp_path / "repository" / "net"
    (model_dir / "1").mkdir(parents=True)
    torch.manual_seed(0)
    torch.jit.script(Net().eval()).save(str(model_dir / "1" / "model.pt"))
    config_text = textwrap.dedent(
        """
        name: "net"
        backend: "pytorch"
        max_batch_size: 8
        input [{ name: "x" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] }]
        output [{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }]
        instance_group [{ count: 1 kind: KIND_GPU }]
        """
    )
    (model_dir / "config.pbtxt").write_text(config_text)
    config = read_config_file(model_dir / "config.pbtxt")
    variants = prepare_variants(
        model_dir, config, model_dir / "1" / "model.pt", ["fp16", "bf16"], 0.25, None, tmp_path
    )
    for variant in variants:
        assert variant.usable, variant.verdict
        assert variant.model_path is not None and "checked on GPU 0" in variant.method
        print(variant.verdict)
    fp16 = next(v for v in variants if v.precision == "fp16")
    assert fp16.model_path is not None
    shutil.copy(fp16.model_path, model_dir / "1" / "model.fp16.pt")
    (model_dir / "config.pbtxt").write_text(
        config_text + 'default_model_filename: "model.fp16.pt"\n'
    )
    rows = np.random.default_rng(3).random((2, 3, 8, 8), dtype=np.float32)
    with serving(model_dir.parent, tmp_path / "server.log") as server:
        client = httpclient.InferenceServerClient(server.url)
        tensor = httpclient.InferInput("x", list(rows.shape), "FP32")
        tensor.set_data_from_numpy(rows)
        served = client.infer("net", [tensor]).as_numpy("y")
    fp32 = torch.jit.load(str(model_dir / "1" / "model.pt"))
    with torch.inference_mode():
        expected = fp32(torch.from_numpy(rows)).numpy()
    assert served.dtype == np.float32  # the config's type at the boundary
    np.testing.assert_allclose(served, expected, rtol=2e-2, atol=2e-2)


def _cupy_and_cuda_python() -> bool:
    try:
        import cupy  # noqa: F401
        import tritonclient.utils.cuda_shared_memory  # noqa: F401
    except (ImportError, RuntimeError):
        return False
    return True


needs_cuda_shm = pytest.mark.skipif(
    not HERE.gpus or not _cupy_and_cuda_python(),
    reason="needs a GPU, cupy (the server's side) and cuda-python (tritonclient's side)",
)


@needs_cuda_shm
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cuda_shared_memory_inputs_and_outputs(tmp_path: Path, protocol: str) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.utils.cuda_shared_memory as cudashm

    repository = tmp_path / "repository"
    shutil.copytree(BUNDLED_REPOSITORY / "simple", repository / "simple")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    size = a.nbytes
    names = ("in0", "in1", "out0", "out1")
    handles = {name: cudashm.create_shared_memory_region(name, size, 0) for name in names}
    module = httpclient if protocol == "http" else grpcclient
    try:
        cudashm.set_shared_memory_region(handles["in0"], [a])
        cudashm.set_shared_memory_region(handles["in1"], [b])
        with serving(repository, tmp_path / "server.log") as server:
            client = module.InferenceServerClient(
                server.url if protocol == "http" else server.grpc_url
            )
            for name, handle in handles.items():
                client.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), 0, size)
            inputs = [module.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in (0, 1)]
            inputs[0].set_shared_memory("in0", size)
            inputs[1].set_shared_memory("in1", size)
            outputs = [module.InferRequestedOutput(f"OUTPUT{i}") for i in (0, 1)]
            outputs[0].set_shared_memory("out0", size)
            outputs[1].set_shared_memory("out1", size)
            client.infer("simple", inputs, outputs=outputs)
            client.unregister_cuda_shared_memory()
        total = cudashm.get_contents_as_numpy(handles["out0"], "INT32", [1, 16])
        difference = cudashm.get_contents_as_numpy(handles["out1"], "INT32", [1, 16])
    finally:
        for handle in handles.values():
            cudashm.destroy_shared_memory_region(handle)
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)

"""The python backend with real stub processes, on small models written into tmp_path."""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import BatchTimes, InstanceContext
from serve.backends.python import PythonBackend
from serve.backends.python.autocomplete import autocomplete_python_config, may_define_hook
from serve.backends.python.instance import PythonModelInstance
from serve.errors import ErrorKind, ServeError
from serve.inference import InferRequest, RequestedOutput
from serve.shared_memory.segment import segment_prefix

pytestmark = pytest.mark.timeout(120)

ADD_SUB_CONFIG = """
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] }
]
"""

# Add/sub; records its initialize args and finalize; os._exit(3)s when INPUT0 starts with -3.
ADD_SUB_MODEL = """
import json
import os
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.dir = Path(args["model_repository"])
        name = args["model_instance_name"]
        (self.dir / f"args_{name}_{os.getpid()}.json").write_text(json.dumps(args))
        self.name = name

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if a.size and a.flat[0] == -3:
                os._exit(3)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses

    def finalize(self):
        (self.dir / f"finalized_{self.name}").write_text("yes")
"""


def make_instance(
    tmp_path: Path,
    source: str,
    config_text: str = ADD_SUB_CONFIG,
    name: str = "add_sub_py",
    index: int = 0,
) -> PythonModelInstance:
    model_dir = tmp_path / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    model_file = model_dir / "1" / "model.py"
    model_file.write_text(textwrap.dedent(source))
    config = text_format.Parse(config_text, mc.ModelConfig())
    config.name = name
    context = InstanceContext(
        model_name=name,
        model_version=1,
        repository_path=tmp_path,
        model_dir=model_dir,
        model_path=model_file,
        config=config,
        instance_name=f"{name}_{index}",
        instance_index=index,
    )
    instance = PythonBackend().create_instance(context)
    assert isinstance(instance, PythonModelInstance)
    return instance


def add_sub_request(rows: int, cols: int = 4, start: float = 0.0) -> InferRequest:
    a = (np.arange(rows * cols, dtype=np.float32) + start).reshape(rows, cols)
    b = np.full((rows, cols), 2.0, dtype=np.float32)
    return InferRequest("add_sub_py", "", {"INPUT0": a, "INPUT1": b})


def our_children() -> set[int]:
    """Child processes of the test, except multiprocessing's long-lived resource tracker."""
    return {
        p.pid
        for p in psutil.Process().children(recursive=True)
        if "resource_tracker" not in " ".join(_cmdline(p))
    }


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def our_segments() -> list[str]:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return []
    return [p.name for p in shm.iterdir() if p.name.startswith(segment_prefix())]


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    before = our_children()
    yield
    assert our_children() - before == set()
    assert our_segments() == []


@pytest.fixture
def add_sub(tmp_path: Path) -> Iterator[PythonModelInstance]:
    instance = make_instance(tmp_path, ADD_SUB_MODEL)
    instance.load()
    yield instance
    instance.unload()


def test_initialize_gets_triton_args(tmp_path: Path, add_sub: PythonModelInstance) -> None:
    (args_file,) = (tmp_path / "add_sub_py").glob("args_add_sub_py_0_*.json")
    args = json.loads(args_file.read_text())
    assert all(isinstance(value, str) for value in args.values())
    assert args["model_name"] == "add_sub_py"
    assert args["model_version"] == "1"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_name"] == "add_sub_py_0"
    assert args["model_instance_device_id"] == "0"
    assert args["model_repository"] == str(tmp_path / "add_sub_py")
    config = json.loads(args["model_config"])
    assert config["name"] == "add_sub_py"
    assert config["max_batch_size"] == 8
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    assert config["input"][0]["data_type"] == "TYPE_FP32"


def test_large_tensors_grow_both_arenas(add_sub: PythonModelInstance) -> None:
    small = add_sub.execute([add_sub_request(1)], BatchTimes())
    assert isinstance(small[0], dict)
    big = add_sub_request(2, cols=300_000)  # 2.4 MB per tensor, arenas start at 64 KiB
    (result,) = add_sub.execute([big], BatchTimes())
    assert isinstance(result, dict)
    np.testing.assert_array_equal(result["OUTPUT0"], big.inputs["INPUT0"] + 2)
    (again,) = add_sub.execute([add_sub_request(3)], BatchTimes())
    assert isinstance(again, dict)
    np.testing.assert_array_equal(again["OUTPUT1"], add_sub_request(3).inputs["INPUT0"] - 2)


def test_initialize_error_makes_load_fail(tmp_path: Path) -> None:
    source = """
    class TritonPythonModel:
        def initialize(self, args):
            raise ValueError("weights are missing")

        def execute(self, requests):
            return []
    """
    instance = make_instance(tmp_path, source)
    with pytest.raises(ServeError) as info:
        instance.load()
    assert info.value.kind is ErrorKind.UNAVAILABLE
    assert "add_sub_py: initialize failed: ValueError: weights are missing" in info.value.message
    assert "model.py:4" in info.value.message
    instance.unload()
    instance.unload()


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("class Other:\n    pass\n", "load failed: model.py defines no class TritonPythonModel"),
        ("import no_such_module_here\n", "ModuleNotFoundError: No module named"),
        ("def broken(:\n", "SyntaxError"),
        ("class TritonPythonModel:\n    pass\n", "has no execute method"),
    ],
)
def test_bad_model_files_make_load_fail(tmp_path: Path, source: str, reason: str) -> None:
    instance = make_instance(tmp_path, source)
    with pytest.raises(ServeError) as info:
        instance.load()
    assert info.value.kind is ErrorKind.UNAVAILABLE
    assert info.value.message.startswith("add_sub_py: ")
    assert reason in info.value.message
    instance.unload()


def test_sibling_modules_import(tmp_path: Path) -> None:
    version_dir = tmp_path / "add_sub_py" / "1"
    version_dir.mkdir(parents=True)
    (version_dir / "helpers.py").write_text("def combine(a, b):\n    return a + b, a - b\n")
    source = """
    import triton_python_backend_utils as pb_utils
    from helpers import combine

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for r in requests:
                s, d = combine(r.inputs()[0].as_numpy(), r.inputs()[1].as_numpy())
                out.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", s), pb_utils.Tensor("OUTPUT1", d)]))
            return out
    """
    instance = make_instance(tmp_path, source)
    instance.load()
    try:
        (result,) = instance.execute([add_sub_request(2)], BatchTimes())
        assert isinstance(result, dict)
        np.testing.assert_array_equal(result["OUTPUT0"], add_sub_request(2).inputs["INPUT0"] + 2)
    finally:
        instance.unload()


def test_execute_exception_fails_the_whole_batch(tmp_path: Path) -> None:
    source = """
    class TritonPythonModel:
        def execute(self, requests):
            raise RuntimeError("kaboom")
    """
    instance = make_instance(tmp_path, source)
    instance.load()
    try:
        results = instance.execute([add_sub_request(1), add_sub_request(2)], BatchTimes())
        assert len(results) == 2
        for result in results:
            assert isinstance(result, ServeError)
            assert result.kind is ErrorKind.INTERNAL
            assert "add_sub_py" in result.message
            assert "RuntimeError: kaboom" in result.message
        # The stub survives a model exception.
        assert instance.pid is not None
    finally:
        instance.unload()


def test_wrong_number_of_responses_fails_the_batch(tmp_path: Path) -> None:
    source = """
    class TritonPythonModel:
        def execute(self, requests):
            return []
    """
    instance = make_instance(tmp_path, source)
    instance.load()
    try:
        results = instance.execute([add_sub_request(1), add_sub_request(1)], BatchTimes())
        assert all(isinstance(r, ServeError) for r in results)
        assert (
            "Number of InferenceResponse objects do not match the number of InferenceRequest "
            "objects. InferenceRequest(s) size is:2, and InferenceResponse(s) size is:0"
        ) in str(results[0])
    finally:
        instance.unload()


def test_triton_error_for_one_request(tmp_path: Path) -> None:
    source = """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                if (a < 0).any():
                    error = pb_utils.TritonError("negative input", pb_utils.TritonError.INVALID_ARG)
                    responses.append(pb_utils.InferenceResponse(error=error))
                elif (a > 100).any():
                    responses.append(pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("too big")))
                else:
                    responses.append(pb_utils.InferenceResponse([
                        pb_utils.Tensor("OUTPUT0", a), pb_utils.Tensor("OUTPUT1", a)]))
            return responses
    """
    instance = make_instance(tmp_path, source)
    instance.load()
    try:
        results = instance.execute(
            [add_sub_request(1), add_sub_request(2, start=-5), add_sub_request(1, start=500)],
            BatchTimes(),
        )
        assert isinstance(results[0], dict)
        assert isinstance(results[1], ServeError)
        assert results[1].kind is ErrorKind.INVALID_ARGUMENT
        assert results[1].message == "add_sub_py: negative input"
        assert isinstance(results[2], ServeError)
        assert results[2].kind is ErrorKind.INTERNAL
    finally:
        instance.unload()


def test_stub_death_fails_the_batch_and_the_next_batch_restarts_it(
    tmp_path: Path, add_sub: PythonModelInstance
) -> None:
    first_pid = add_sub.pid
    results = add_sub.execute([add_sub_request(1), add_sub_request(1, start=-3)], BatchTimes())
    for result in results:
        assert isinstance(result, ServeError)
        assert result.kind is ErrorKind.INTERNAL
        assert f"stub process (pid {first_pid}) exited with code 3" in result.message
    assert add_sub.pid is None
    (result,) = add_sub.execute([add_sub_request(2)], BatchTimes())
    assert isinstance(result, dict)
    assert add_sub.pid not in (None, first_pid)
    # initialize ran again, in the new process.
    args_files = sorted((tmp_path / "add_sub_py").glob("args_add_sub_py_0_*.json"))
    assert len(args_files) == 2


def test_stub_killed_by_a_signal(add_sub: PythonModelInstance) -> None:
    pid = add_sub.pid
    assert pid is not None
    psutil.Process(pid).kill()
    (result,) = add_sub.execute([add_sub_request(1)], BatchTimes())
    assert isinstance(result, ServeError)
    assert "killed by SIGKILL" in result.message
    (result,) = add_sub.execute([add_sub_request(1)], BatchTimes())
    assert isinstance(result, dict)


BYTES_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [
  { name: "ECHO" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "LENGTHS" data_type: TYPE_INT32 dims: [ -1 ] }
]
"""

BYTES_MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT")
            items = text.as_numpy()
            info = {
                "id": request.request_id(),
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "parameters": json.loads(request.parameters()),
                "requested": request.requested_output_names(),
                "dtype": items.dtype.str,
                "triton_dtype": text.triton_dtype(),
                "shape": text.shape(),
            }
            echo = np.array([item.decode().upper() for item in items], dtype=object)
            lengths = np.array([len(item) for item in items], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("ECHO", echo),
                pb_utils.Tensor("INFO", np.array([json.dumps(info)], dtype=np.bytes_)),
                pb_utils.Tensor("LENGTHS", lengths),
            ]))
        return responses
"""


def test_bytes_tensors_async_execute_and_request_metadata(tmp_path: Path) -> None:
    instance = make_instance(tmp_path, BYTES_MODEL, BYTES_CONFIG, name="echo")
    instance.load()
    try:
        texts = np.array([b"hello", b"world!", b""], dtype=object)
        request = InferRequest(
            "echo",
            "",
            {"TEXT": texts},
            id="req-7",
            parameters={"sequence_id": 42, "sequence_start": True, "custom": "x", "priority": 1},
        )
        plain = InferRequest(
            "echo",
            "",
            {"TEXT": np.array([b"a"], dtype=object)},
            requested_outputs=[RequestedOutput("ECHO")],
        )
        first, second = instance.execute([request, plain], BatchTimes())
        assert isinstance(first, dict) and isinstance(second, dict)
        assert first["ECHO"].dtype == object
        assert list(first["ECHO"]) == [b"HELLO", b"WORLD!", b""]
        np.testing.assert_array_equal(first["LENGTHS"], [5, 6, 0])
        info = json.loads(first["INFO"][0])
        assert info == {
            "id": "req-7",
            "correlation_id": 42,
            "flags": 1,
            "parameters": {"custom": "x"},
            "requested": ["ECHO", "INFO", "LENGTHS"],
            "dtype": "|O",
            "triton_dtype": 13,
            "shape": [3],
        }
        second_info = json.loads(second["INFO"][0])
        assert second_info["requested"] == ["ECHO"]
        assert second_info["flags"] == 0
        assert second_info["correlation_id"] == 0
    finally:
        instance.unload()


PARALLEL_MODEL = """
import os
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.dir = Path(args["model_repository"])
        self.name = args["model_instance_name"]

    def execute(self, requests):
        (self.dir / f"inside_{self.name}").write_text(str(os.getpid()))
        # Wait (bounded) until the other instance is inside execute too.
        deadline = time.monotonic() + 20
        saw_other = False
        while time.monotonic() < deadline and not saw_other:
            saw_other = any(p.name != f"inside_{self.name}" for p in self.dir.glob("inside_*"))
            time.sleep(0.01)
        out = np.array([os.getpid(), int(saw_other)], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out),
                                            pb_utils.Tensor("OUTPUT1", out)])
                for _ in requests]
"""


def test_two_instances_run_in_parallel(tmp_path: Path) -> None:
    instances = [make_instance(tmp_path, PARALLEL_MODEL, index=i) for i in range(2)]
    results: dict[int, object] = {}
    try:
        for instance in instances:
            instance.load()

        def run(index: int) -> None:
            (results[index],) = instances[index].execute([add_sub_request(1)], BatchTimes())

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        for instance in instances:
            instance.unload()
    pids = set()
    for index in range(2):
        result = results[index]
        assert isinstance(result, dict)
        pid, saw_other = (int(v) for v in result["OUTPUT0"])
        assert saw_other == 1, "each instance saw the other inside execute at the same time"
        pids.add(pid)
    assert len(pids) == 2
    assert os.getpid() not in pids


def test_unload_finalizes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    # The stub process ending and a second unload are checked in test_backend_contract.py.
    instance = make_instance(tmp_path, ADD_SUB_MODEL)
    instance.load()
    assert our_segments() != []
    instance.execute([add_sub_request(2)], BatchTimes())
    instance.unload()
    assert (tmp_path / "add_sub_py" / "finalized_add_sub_py_0").read_text() == "yes"
    assert our_segments() == []
    (result,) = instance.execute([add_sub_request(1)], BatchTimes())
    assert isinstance(result, ServeError)
    assert result.kind is ErrorKind.UNAVAILABLE


AUTOCOMPLETE_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        present = {i["name"] for i in auto_complete_model_config.as_dict().get("input", [])}
        auto_complete_model_config.set_max_batch_size(16)
        auto_complete_model_config.set_dynamic_batching()
        for name in ("INPUT0", "INPUT1"):
            auto_complete_model_config.add_input(
                {"name": name, "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.add_output(
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        print("already present:", sorted(present))
        return auto_complete_model_config

    def execute(self, requests):
        return []
"""


def _autocomplete(tmp_path: Path, source: str, config_text: str) -> mc.ModelConfig:
    model_file = tmp_path / "auto" / "1" / "model.py"
    model_file.parent.mkdir(parents=True, exist_ok=True)
    model_file.write_text(textwrap.dedent(source))
    config = text_format.Parse(config_text, mc.ModelConfig())
    PythonBackend().autocomplete(config, model_file)
    return config


def test_auto_complete_config_fills_what_the_config_lacks(tmp_path: Path) -> None:
    config = _autocomplete(
        tmp_path,
        AUTOCOMPLETE_MODEL,
        'name: "auto" backend: "python" input [{ name: "INPUT1" dims: [ 4 ] }]',
    )
    assert config.max_batch_size == 16
    assert config.HasField("dynamic_batching")
    assert [i.name for i in config.input] == ["INPUT1", "INPUT0"]
    assert all(i.data_type == mc.TYPE_FP32 and list(i.dims) == [4] for i in config.input)
    assert [(o.name, list(o.dims)) for o in config.output] == [("OUTPUT0", [4])]


def test_auto_complete_config_keeps_what_the_config_says(tmp_path: Path) -> None:
    config = _autocomplete(
        tmp_path, AUTOCOMPLETE_MODEL, 'name: "auto" backend: "python" max_batch_size: 4'
    )
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")


def test_auto_complete_dynamic_batching_over_a_sequence_batcher_is_refused(
    tmp_path: Path,
) -> None:
    # Triton's set_dynamic_batching raises when the config has another scheduler.
    with pytest.raises(ServeError) as info:
        _autocomplete(
            tmp_path,
            AUTOCOMPLETE_MODEL,
            'name: "auto" backend: "python" max_batch_size: 4 sequence_batching {}',
        )
    assert (
        "Configuration specified scheduling_choice as 'sequence_batching', but "
        "auto-complete-config function for model 'auto' tries to set scheduling_choice as "
        "'dynamic_batching'" in info.value.message
    )


def test_auto_complete_config_conflict_names_the_tensor(tmp_path: Path) -> None:
    with pytest.raises(ServeError) as info:
        _autocomplete(
            tmp_path,
            AUTOCOMPLETE_MODEL,
            'name: "auto" input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] }]',
        )
    assert "'INPUT0'" in info.value.message
    assert "[3]" in info.value.message and "[4]" in info.value.message


def test_auto_complete_config_absent_leaves_config_alone(tmp_path: Path) -> None:
    config_text = 'name: "auto" backend: "python"'
    config = _autocomplete(tmp_path, ADD_SUB_MODEL, config_text)
    assert config == text_format.Parse(config_text, mc.ModelConfig())


def test_auto_complete_config_error_is_reported(tmp_path: Path) -> None:
    source = """
    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(config):
            config.add_input({"name": "X"})
            return config
    """
    with pytest.raises(ServeError) as info:
        _autocomplete(tmp_path, source, 'name: "auto"')
    assert info.value.kind is ErrorKind.UNAVAILABLE
    assert "auto: auto_complete_config failed: ValueError" in info.value.message
    assert (
        "input 'X' in auto-complete-config function for model 'auto' is missing "
        "'data_type' property." in info.value.message
    )


def test_autocomplete_function_is_exposed(tmp_path: Path) -> None:
    model_file = tmp_path / "auto" / "1" / "model.py"
    model_file.parent.mkdir(parents=True)
    model_file.write_text(textwrap.dedent(AUTOCOMPLETE_MODEL))
    config = mc.ModelConfig(name="auto")
    autocomplete_python_config(config, model_file)
    assert len(config.input) == 2
    autocomplete_python_config(config, tmp_path / "missing" / "model.py")  # no file: no-op


def test_pb_utils_api() -> None:
    from serve.backends.python import pb_utils

    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("X", array)
    assert (tensor.name(), tensor.shape(), tensor.is_cpu()) == ("X", [2, 3], True)
    assert tensor.triton_dtype() == 11
    np.testing.assert_array_equal(
        pb_utils.Tensor.from_dlpack("Y", tensor.as_numpy()).as_numpy(), array
    )
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.Tensor("Z", None)  # type: ignore[arg-type]
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_to_numpy_type(pb_utils.numpy_to_triton_type(np.int64)) is np.int64
    request = pb_utils.InferenceRequest(
        model_name="m", requested_output_names=["Y"], inputs=[tensor], parameters={"k": 1}
    )
    assert pb_utils.get_input_tensor_by_name(request, "X") is tensor
    assert pb_utils.get_input_tensor_by_name(request, "nope") is None
    assert json.loads(request.parameters()) == {"k": 1}
    with pytest.raises(pb_utils.TritonModelException, match="needs the server"):
        request.exec()
    response = pb_utils.InferenceResponse(output_tensors=[tensor])
    assert not response.has_error() and pb_utils.get_output_tensor_by_name(response, "X") is tensor
    error = pb_utils.TritonError("bad", pb_utils.TritonError.NOT_FOUND)
    failed = pb_utils.InferenceResponse(error=error)
    assert failed.has_error() and failed.error() is error
    assert (error.message(), error.code()) == ("bad", pb_utils.TritonError.NOT_FOUND)
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2


def test_inputs_kept_by_the_model_do_not_change(tmp_path: Path) -> None:
    source = """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            self.kept = None

        def execute(self, requests):
            responses = []
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                previous = a if self.kept is None else self.kept
                self.kept = a[:, :2]  # a view of the input, kept across calls
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUTPUT0", previous), pb_utils.Tensor("OUTPUT1", a)]))
            return responses
    """
    instance = make_instance(tmp_path, source)
    instance.load()
    try:
        outputs = []
        for start in (0.0, 100.0, 200.0):
            (result,) = instance.execute([add_sub_request(1, start=start)], BatchTimes())
            assert isinstance(result, dict)
            outputs.append(result)
        np.testing.assert_array_equal(outputs[1]["OUTPUT0"], [[0, 1]])
        np.testing.assert_array_equal(outputs[2]["OUTPUT0"], [[100, 101]])
        np.testing.assert_array_equal(outputs[2]["OUTPUT1"], [[200, 201, 202, 203]])
    finally:
        instance.unload()


SLOW_MODEL = """
import time
from pathlib import Path

class TritonPythonModel:
    def initialize(self, args):
        self.dir = Path(args["model_repository"])
        if args["model_name"] == "slow_init":
            time.sleep(60)

    def execute(self, requests):
        (self.dir / "executing").write_text("")
        time.sleep(60)
        return []
"""


def test_load_timeout_stops_the_stub(tmp_path: Path) -> None:
    instance = make_instance(tmp_path, SLOW_MODEL, name="slow_init")
    instance.load_timeout_s = 1.0
    with pytest.raises(ServeError) as info:
        instance.load()
    assert info.value.kind is ErrorKind.UNAVAILABLE
    assert "slow_init: the model did not load within 1 s" in info.value.message
    instance.unload()


def test_unload_during_a_stuck_batch_kills_the_stub(tmp_path: Path) -> None:
    instance = make_instance(tmp_path, SLOW_MODEL)
    instance.finalize_timeout_s = 1.0
    instance.load()
    results: list[object] = []
    thread = threading.Thread(
        target=lambda: results.extend(instance.execute([add_sub_request(1)], BatchTimes()))
    )
    thread.start()
    marker = tmp_path / "add_sub_py" / "executing"
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    instance.unload()
    thread.join(timeout=30)
    assert not thread.is_alive()
    (result,) = results
    assert isinstance(result, ServeError)
    assert "killed by SIGKILL" in result.message


def test_empty_tensors(add_sub: PythonModelInstance) -> None:
    (result,) = add_sub.execute([add_sub_request(0)], BatchTimes())
    assert isinstance(result, dict)
    assert result["OUTPUT0"].shape == (0, 4)


def test_a_model_without_the_hook_is_not_imported_to_look_for_it(tmp_path: Path) -> None:
    # Importing this model would fail; with no hook to run, loading is what reports it.
    source = """
    import a_module_that_does_not_exist

    class TritonPythonModel:
        def execute(self, requests):
            return []
    """
    config_text = 'name: "auto" backend: "python"'
    assert _autocomplete(tmp_path, source, config_text) == text_format.Parse(
        config_text, mc.ModelConfig()
    )


def test_a_hook_inherited_from_another_module_still_runs(tmp_path: Path) -> None:
    base = tmp_path / "auto" / "1" / "hooks.py"
    base.parent.mkdir(parents=True)
    base.write_text(
        textwrap.dedent(
            """
            class WithHook:
                @staticmethod
                def auto_complete_config(config):
                    config.set_max_batch_size(8)
                    return config
            """
        )
    )
    source = """
    from hooks import WithHook

    class TritonPythonModel(WithHook):
        def execute(self, requests):
            return []
    """
    config = _autocomplete(tmp_path, source, 'name: "auto" backend: "python"')
    assert config.max_batch_size == 8


@pytest.mark.parametrize(
    ("source", "may"),
    [
        ("class TritonPythonModel:\n    pass\n", False),
        ("class TritonPythonModel(object):\n    pass\n", False),
        ("class TritonPythonModel(Base):\n    pass\n", True),
        ("@register\nclass TritonPythonModel:\n    pass\n", True),
        ("class TritonPythonModel(metaclass=M):\n    pass\n", True),
        ("from elsewhere import TritonPythonModel\n", True),
        ("class TritonPythonModel:\n    pass\nTritonPythonModel = Other\n", True),
        ("from m import Other as TritonPythonModel\nclass TritonPythonModel:\n    pass\n", True),
        ("class TritonPythonModel:\n    def auto_complete_config(c):\n        return c\n", True),
        ("setattr(X, 'auto_complete_config', f)\nclass TritonPythonModel:\n    pass\n", True),
        ("class TritonPythonModel:\n  x = (\n", True),
    ],
)
def test_may_define_hook_is_false_only_when_it_surely_cannot(source: str, may: bool) -> None:
    assert may_define_hook(source.encode()) is may

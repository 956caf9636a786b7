"""Small python-backend models and ensembles over them, written into a scratch repository.

scale:  X FP32 [4] -> Y = 2 X                     (batching, no queue delay)
offset: A FP32 [4] -> B = A + OFFSET (param, 1)   (fails a request whose input exceeds 1000)
branch_a / branch_b: K INT32 [1] -> V = 10 K / 100 K; each writes "<name>-<K>" into the
        rendezvous folder and waits (bounded) for its peer's file: run one after the other
        they fail, so an answer proves they ran at the same time.
join:   P, Q INT32 [1] -> S = P + Q
batched_scale: scale with a 1 s queue delay and preferred batch 4 (batching across requests)
"""

from __future__ import annotations

from pathlib import Path

PYTHON_MODEL = """\
import json
import pathlib
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.name = config["name"]
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.offset = float(params.get("OFFSET", "1"))
        self.folder = pathlib.Path(params.get("RENDEZVOUS", "."))
        self.peer = params.get("PEER", "")

    def execute(self, requests):
        return [self.answer(request) for request in requests]

    def tensor(self, request, name):
        return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

    def answer(self, request):
        kind = self.name.removeprefix("batched_")
        if kind == "scale":
            return pb_utils.InferenceResponse([pb_utils.Tensor("Y", self.tensor(request, "X") * 2)])
        if kind == "offset":
            a = self.tensor(request, "A")
            if (a > 1000).any():
                return pb_utils.InferenceResponse(error=pb_utils.TritonError("input over 1000"))
            return pb_utils.InferenceResponse([pb_utils.Tensor("B", a + self.offset)])
        if kind == "join":
            s = self.tensor(request, "P") + self.tensor(request, "Q")
            return pb_utils.InferenceResponse([pb_utils.Tensor("S", s)])
        k = self.tensor(request, "K")
        key = int(k.reshape(-1)[0])
        (self.folder / f"{self.name}-{key}").touch()
        deadline = time.monotonic() + 20
        while not (self.folder / f"{self.peer}-{key}").exists():
            if time.monotonic() > deadline:
                return pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"{self.peer} never started for key {key}")
                )
            time.sleep(0.01)
        factor = 10 if self.name == "branch_a" else 100
        return pb_utils.InferenceResponse([pb_utils.Tensor("V", (k * factor).astype(np.int32))])
"""


def _tensor(name: str, data_type: str, dims: str) -> str:
    return f'{{ name: "{name}" data_type: {data_type} dims: [ {dims} ] }}'


def python_config(
    name: str, inputs: list[str], outputs: list[str], extra: str = "", batch: int = 8
) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {batch}\n'
        f"input [ {', '.join(inputs)} ]\noutput [ {', '.join(outputs)} ]\n{extra}"
    )


def _param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'


F4 = ("TYPE_FP32", "4")
I1 = ("TYPE_INT32", "1")


def composing_configs(rendezvous: Path) -> dict[str, str]:
    def branch(name: str, peer: str) -> str:
        extra = _param("RENDEZVOUS", str(rendezvous)) + _param("PEER", peer)
        return python_config(name, [_tensor("K", *I1)], [_tensor("V", *I1)], extra)

    return {
        "scale": python_config("scale", [_tensor("X", *F4)], [_tensor("Y", *F4)]),
        "offset": python_config("offset", [_tensor("A", *F4)], [_tensor("B", *F4)]),
        "branch_a": branch("branch_a", "branch_b"),
        "branch_b": branch("branch_b", "branch_a"),
        "join": python_config("join", [_tensor("P", *I1), _tensor("Q", *I1)], [_tensor("S", *I1)]),
        "batched_scale": python_config(
            "batched_scale",
            [_tensor("X", *F4)],
            [_tensor("Y", *F4)],
            "dynamic_batching { preferred_batch_size: [ 4 ] "
            "max_queue_delay_microseconds: 1000000 }\n",
        ),
    }


def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1{maps} }}'


def ensemble_config(
    name: str, inputs: list[str], outputs: list[str], steps: list[str], batch: int = 8
) -> str:
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {batch}\n'
        f"input [ {', '.join(inputs)} ]\noutput [ {', '.join(outputs)} ]\n"
        f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
    )


def good_ensembles() -> dict[str, str]:
    return {
        # INPUT -> scale -> SCALED -> offset -> OUTPUT
        "pipeline": ensemble_config(
            "pipeline",
            [_tensor("INPUT", *F4)],
            [_tensor("OUTPUT", *F4), _tensor("SCALED", *F4)],
            [
                step("scale", {"X": "INPUT"}, {"Y": "SCALED"}),
                step("offset", {"A": "SCALED"}, {"B": "OUTPUT"}),
            ],
        ),
        # KEY -> branch_a | branch_b -> join -> SUM
        "diamond": ensemble_config(
            "diamond",
            [_tensor("KEY", *I1)],
            [_tensor("SUM", *I1)],
            [
                step("branch_a", {"K": "KEY"}, {"V": "a"}),
                step("branch_b", {"K": "KEY"}, {"V": "b"}),
                step("join", {"P": "a", "Q": "b"}, {"S": "SUM"}),
            ],
        ),
        "batched": ensemble_config(
            "batched",
            [_tensor("INPUT", *F4)],
            [_tensor("OUTPUT", *F4)],
            [step("batched_scale", {"X": "INPUT"}, {"Y": "OUTPUT"})],
        ),
    }


def bad_ensembles() -> dict[str, str]:
    """Each is wrong in one way; the expected error text is in BAD_REASONS."""
    one_in, one_out = [_tensor("IN", *F4)], [_tensor("OUT", *F4)]
    return {
        "bad_key": ensemble_config(
            "bad_key", one_in, one_out, [step("scale", {"NOPE": "IN"}, {"Y": "OUT"})]
        ),
        "bad_cycle": ensemble_config(
            "bad_cycle",
            [_tensor("IN", *I1)],
            [_tensor("OUT", *I1)],
            [
                step("join", {"P": "IN", "Q": "t2"}, {"S": "t1"}),
                step("join", {"P": "t1", "Q": "IN"}, {"S": "t2"}),
                step("join", {"P": "t1", "Q": "t1"}, {"S": "OUT"}),
            ],
        ),
        "bad_output": ensemble_config(
            "bad_output",
            one_in,
            [*one_out, _tensor("OUT2", *F4)],
            [step("scale", {"X": "IN"}, {"Y": "OUT"})],
        ),
        "bad_type": ensemble_config(
            "bad_type",
            [_tensor("IN", "TYPE_INT32", "4")],
            one_out,
            [step("scale", {"X": "IN"}, {"Y": "OUT"})],
        ),
        "bad_missing": ensemble_config(
            "bad_missing", one_in, one_out, [step("nowhere", {"X": "IN"}, {"Y": "OUT"})]
        ),
    }


BAD_REASONS = {
    "bad_key": "ensemble_scheduling.step[0] (model 'scale').input_map['NOPE']: 'NOPE' is not"
    " an input of model 'scale'",
    "bad_cycle": "ensemble_scheduling.step[0] (model 'join'): is part of a cycle",
    "bad_output": "output 'OUT2': is not produced by any step of the ensemble",
    "bad_type": "ensemble tensor 'IN': ensemble input 'IN' is TYPE_INT32 but input 'X' of"
    " ensemble_scheduling.step[0] (model 'scale') expects TYPE_FP32",
    "bad_missing": "ensemble_scheduling.step[0] (model 'nowhere'):",
}


def write_repository(root: Path, models: dict[str, str]) -> Path:
    """Write each model's config.pbtxt and version folder 1/ (model.py for python models; an
    ensemble's version folder stays empty, as Triton's layout has it)."""
    repository = root / "repository"
    for name, config in models.items():
        version = repository / name / "1"
        version.mkdir(parents=True, exist_ok=True)
        (repository / name / "config.pbtxt").write_text(config)
        if 'backend: "python"' in config:
            (version / "model.py").write_text(PYTHON_MODEL)
    return repository

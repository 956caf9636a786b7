"""The python backend's overhead: the same model.py on our server and on NVIDIA Triton 2.51.

Both servers serve both models on their python backend, from the same config.pbtxt and model.py
(written into a temporary repository per server):
- `identity_fp32`: OUTPUT0 = INPUT0, FP32 [16], max_batch_size 8, dynamic batching, one CPU
  instance: what the backend costs when the model does nothing;
- `simple`: Triton's INT32 add/sub (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, [16]),
  same batching and instance.

Both servers start once, on free 127.0.0.1 ports, and every model is checked over every protocol
with tritonclient (outputs equal to numpy's: Triton's python backend build sends 0-byte outputs
with numpy 2, which perf_analyzer would not notice) before anything is measured. Then NVIDIA's
perf_analyzer measures each model, protocol (HTTP, gRPC) and concurrency with the two servers
interleaved (ours, Triton, ours, Triton, ...), `--repeats` times each, `--window-ms` windows; the
script prints every run's infer/s and p95, then per model, protocol and concurrency each
server's median and range, its median p95, and the ratio ours/Triton of the medians. A run whose
windows never stabilise (a busy machine) is measured again, up to `--attempts` times, then left
out: `n` says how many runs a median holds. Both servers are stopped at the end, on Ctrl-C and
SIGTERM too.

Raw results: benchmarks/results/python_backend_overhead.json, or
python_backend_overhead-<models>-<protocols>.json (names joined by "+") when --models or
--protocols leave some out: results_record's header, the settings and every run (server, cell,
concurrency, infer/s, p95 in us). `--smoke` (simple, HTTP, c1, one repeat, 1 s windows) writes
into a new temporary folder, `--output` into the one it names.

Installs on first use: scripts/install_perf_analyzer.sh and scripts/install_triton_peer.sh
(both under .cache/). Run: python benchmarks/python_backend_overhead.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import results_record
from google.protobuf import text_format
from peer import (
    SIMPLE_MODEL,
    Run,
    check_outputs,
    install,
    measure,
    ours,
    python_model,
    revision,
    run_main,
    summary,
    triton,
)
from results_record import header, parse_with_smoke, write_record
from tritonclient.grpc import model_config_pb2 as mc

PROTOCOLS = ("http", "grpc")
BATCHING = """
max_batch_size: 8
dynamic_batching { }
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

IDENTITY_CONFIG = (
    """
name: "identity_fp32"
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 16 ] } ]
"""
    + BATCHING
)
IDENTITY_MODEL = '''"""identity_fp32: OUTPUT0 = INPUT0"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", in0)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
'''

SIMPLE_CONFIG = (
    """
name: "simple"
input [
  { name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] },
  { name: "INPUT1", data_type: TYPE_INT32, dims: [ 16 ] }
]
output [
  { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 16 ] },
  { name: "OUTPUT1", data_type: TYPE_INT32, dims: [ 16 ] }
]
"""
    + BATCHING
)


@dataclass(frozen=True)
class Model:
    name: str
    config: str
    source: str
    inputs: dict[str, np.ndarray]  # one request's inputs for the output check
    expected: dict[str, np.ndarray]


def models() -> list[Model]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16)).astype(np.float32)
    in0, in1 = (rng.integers(-1000, 1000, (1, 16), dtype=np.int32) for _ in range(2))
    return [
        Model("identity_fp32", IDENTITY_CONFIG, IDENTITY_MODEL, {"INPUT0": x}, {"OUTPUT0": x}),
        Model(
            "simple",
            SIMPLE_CONFIG,
            SIMPLE_MODEL,
            {"INPUT0": in0, "INPUT1": in1},
            {"OUTPUT0": in0 + in1, "OUTPUT1": in0 - in1},
        ),
    ]


def write_repository(repository: Path, chosen: list[Model]) -> None:
    for model in chosen:
        config = text_format.Parse(model.config, mc.ModelConfig())
        python_model(config, model.source, repository / model.name)


def record_name(args: argparse.Namespace, every_model: list[str]) -> str:
    """python_backend_overhead, with the models and protocols measured when some are left out:
    a part does not overwrite the whole run's figures."""
    return results_record.record_name(
        "python_backend_overhead",
        {"models": (args.models, every_model), "protocols": (args.protocols, PROTOCOLS)},
    )


def main() -> None:
    everything = models()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per server and cell")
    parser.add_argument("--window-ms", type=int, default=4000, help="perf_analyzer's -p")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--attempts", type=int, default=3, help="tries per run when windows are not stable"
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=[model.name for model in everything],
        default=[model.name for model in everything],
    )
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS))
    parser.add_argument(
        "--ours-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="a flag for our server, e.g. --ours-flag=--grpc-front-end=grpcio (repeatable)",
    )
    smoke = {
        "models": ["simple"],
        "protocols": ["http"],
        "concurrency": [1],
        "repeats": 1,
        "window_ms": 1000,
    }
    args = parse_with_smoke(parser, smoke)
    chosen = [model for model in everything if model.name in args.models]

    binary = install("install_perf_analyzer.sh")
    wrapper = install("install_triton_peer.sh")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    flags = " ".join(args.ours_flag) or "no extra flags"
    print(f"ours: {revision()}, python backend, {flags}; triton 2.51: python backend")
    runs: list[Run] = []
    cells = [f"{model.name} {protocol}" for model in chosen for protocol in args.protocols]
    with tempfile.TemporaryDirectory() as scratch_name, ExitStack() as stack:
        scratch = Path(scratch_name)
        write_repository(scratch / "ours", chosen)
        write_repository(scratch / "triton", chosen)
        servers = [
            stack.enter_context(ours(scratch / "ours", scratch / "ours.log", args.ours_flag)),
            stack.enter_context(triton(wrapper, scratch / "triton", scratch / "triton.log")),
        ]
        for server in servers:
            for protocol in args.protocols:
                if protocol not in server.urls:
                    raise SystemExit(f"{server.name} has no {protocol} endpoint: {server.urls}")
                for model in chosen:
                    check_outputs(server, protocol, model.name, model.inputs, model.expected)
            print(f"{server.name}: {server.urls} (outputs checked)")

        for model in chosen:
            for protocol in args.protocols:
                cell = f"{model.name} {protocol}"
                for concurrency in args.concurrency:
                    for repeat in range(1, args.repeats + 1):
                        for server in servers:
                            label = f"{cell} c{concurrency} #{repeat} {server.name:<6}"
                            run = measure(
                                args.attempts,
                                label,
                                binary,
                                server,
                                model.name,
                                protocol,
                                concurrency,
                                args.window_ms,
                                scratch,
                                cell,
                            )
                            if run is not None:
                                runs.append(run)
    summary(runs, cells, args.concurrency)
    load_at_end = os.getloadavg()[0]
    print(f"load average at the end: {load_at_end:.2f}")
    record = {
        **header("python_backend_overhead"),
        "settings": {
            "models": args.models,
            "protocols": args.protocols,
            "concurrency": args.concurrency,
            "repeats": args.repeats,
            "window_ms": args.window_ms,
            "attempts": args.attempts,
            "ours_flags": args.ours_flag,
            "perf_analyzer": "2.51, -s 20 -r 15",
        },
        "load_average_1m_at_end": round(load_at_end, 2),
        "runs": [asdict(run) for run in runs],
    }
    write_record(record_name(args, [model.name for model in everything]), record, args.output)


if __name__ == "__main__":
    run_main(main)

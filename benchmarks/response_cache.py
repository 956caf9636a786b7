"""The response cache's hit path against a miss and against no cache, on our server.

One `autotune serve` with `--cache-config local,size=65536` serves each model twice from the
same files: `<model>_cached` (its config plus `response_cache { enable: true }`) and `<model>`
(as written). NVIDIA's perf_analyzer measures, interleaved (hit, miss, none, hit, ...) over
`--repeats` rounds at each concurrency:
- hit: `<model>_cached` with one input sent over and over (`--input-data zero`): every request
  after the first is answered from the cache;
- miss: `<model>_cached` cycling through `--distinct` different inputs (a JSON input file)
  that the 64 KiB cache cannot hold at once: least recently used first out, every lookup
  misses and every response is inserted (digits only: resnet18's inputs would make the file
  hundreds of MB);
- none: `<model>` with that same stream of inputs (digits) or the zero input (resnet18): the
  model runs every request, no cache involved.
It prints every run, then per cell the median infer/s [range] and median p95, and the ratios
hit/none and miss/none of the medians; the raw runs go to benchmarks/results/response_cache.json
(date, machine, revision, command). Models come from `python scripts/build_model_repository.py`.

    python benchmarks/response_cache.py [--repeats 5] [--models digits,resnet18]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

import numpy as np
from peer import ROOT, Run, install, measure, ours, run_main
from results_record import header, write_record

CACHE_BYTES = 65536
CELLS = ("hit", "miss", "none")
RESULTS = ROOT / "benchmarks" / "results" / "response_cache.json"


def build_repository(source: Path, destination: Path, models: list[str]) -> None:
    for model in models:
        for name, extra in (
            (model, ""),
            (f"{model}_cached", "\nresponse_cache { enable: true }\n"),
        ):
            shutil.copytree(source / model, destination / name)
            config = destination / name / "config.pbtxt"
            text = config.read_text().replace(f'name: "{model}"', f'name: "{name}"')
            config.write_text(text + extra)


def distinct_inputs(path: Path, count: int, seed: int = 0) -> None:
    """perf_analyzer input data: `count` different digits images ([1, 8, 8] FP32)."""
    rng = np.random.default_rng(seed)
    data = [
        {"input": {"content": rng.random(64).round(4).tolist(), "shape": [1, 8, 8]}}
        for _ in range(count)
    ]
    path.write_text(json.dumps({"data": data}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default="digits,resnet18")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--distinct", type=int, default=1000)
    parser.add_argument("--window-ms", type=int, default=1500)
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    binary = install("install_perf_analyzer.sh")
    runs: list[tuple[str, Run]] = []
    with tempfile.TemporaryDirectory(prefix="autotune-cache-bench-") as scratch_name:
        scratch = Path(scratch_name)
        repository = scratch / "repository"
        build_repository(ROOT / "model_repository", repository, models)
        stream = scratch / "distinct.json"
        distinct_inputs(stream, args.distinct)
        cache_flags = ("--cache-config", f"local,size={CACHE_BYTES}")
        with ours(repository, scratch / "server.log", cache_flags) as server:
            for round_index in range(args.repeats):
                for model in models:
                    many = ("--input-data", str(stream)) if model == "digits" else None
                    cells = {
                        "hit": (f"{model}_cached", ("--input-data", "zero")),
                        "miss": (f"{model}_cached", many),
                        "none": (model, many or ("--input-data", "zero")),
                    }
                    for concurrency in concurrencies:
                        for cell, (served, flags) in cells.items():
                            if flags is None:
                                continue
                            label = (
                                f"[{round_index + 1}/{args.repeats}] {model} {cell:<4} "
                                f"c{concurrency}"
                            )
                            run = measure(
                                args.attempts,
                                label,
                                binary,
                                server,
                                served,
                                "http",
                                concurrency,
                                args.window_ms,
                                scratch,
                                f"{model} {cell}",
                                flags,
                            )
                            if run is not None:
                                runs.append((model, run))
    report(runs, models, concurrencies)
    write_results(args, runs)


def _median(runs: list[Run]) -> float | None:
    return statistics.median(r.infer_per_s for r in runs) if runs else None


def report(runs: list[tuple[str, Run]], models: list[str], concurrencies: list[int]) -> None:
    print("\nmedian infer/s [range], median p95; ratios of the medians against no cache")
    for model in models:
        for concurrency in concurrencies:
            by_cell = {
                cell: [
                    r
                    for m, r in runs
                    if m == model and r.cell == f"{model} {cell}" and r.concurrency == concurrency
                ]
                for cell in CELLS
            }
            none = _median(by_cell["none"])
            for cell, cell_runs in by_cell.items():
                if not cell_runs:
                    continue
                rates = [r.infer_per_s for r in cell_runs]
                p95 = statistics.median(r.p95_us for r in cell_runs) / 1000
                median = statistics.median(rates)
                ratio = f"{median / none:.2f}x none" if none and cell != "none" else ""
                print(
                    f"{model:<9} c{concurrency} {cell:<4} {median:>9,.0f} "
                    f"[{min(rates):,.0f}-{max(rates):,.0f}] p95 {p95:6.2f} ms "
                    f"n={len(rates)} {ratio}"
                )


def write_results(args: argparse.Namespace, runs: list[tuple[str, Run]]) -> None:
    """The raw runs as `args.output` (a JSON file), after the common header."""
    record = {
        **header("response_cache"),
        "cache_bytes": CACHE_BYTES,
        "window_ms": args.window_ms,
        "runs": [
            {
                "model": model,
                "cell": run.cell.split(" ", 1)[1],
                "concurrency": run.concurrency,
                "infer_per_s": run.infer_per_s,
                "p95_us": run.p95_us,
            }
            for model, run in runs
        ],
    }
    print()
    write_record(args.output.stem, record, args.output.parent)


if __name__ == "__main__":
    run_main(main)

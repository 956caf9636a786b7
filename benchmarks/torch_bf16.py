"""bf16 beside fp32 for a TorchScript model on this CPU, as the tuner would serve them.

A ResNet-18-shaped network built from torch.nn (`scripts/builders/torch_resnet.py`; random
weights: speed does not depend on them) is scripted, and its bf16 variant made by the tuner's own
builder (`tuner.precision.torchscript.build_cast_module`: weights and floating inputs cast,
outputs back to float32). Both run in this process on the same float32 batch, interleaved
A, B, A, B over the rounds; each round counts the images of as many forward() calls as fit in
`--seconds`. Prints each round, then the medians, the ranges and the ratio bf16 / fp32 (of
the medians, and of each round's pair).

    python benchmarks/torch_bf16.py [--rounds 5] [--seconds 3] [--batch 8] [--size 224]

Raw results: benchmarks/results/torch_bf16.json (results_record's header, the settings, torch's
version, threads and CPU capability, and each round's images/s of both); `--smoke` (one round of
0.5 s) writes into a new temporary folder, `--output` into the one it names.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from results_record import header, parse_with_smoke, write_record

from common.cpu import native_bf16
from tuner.precision.torchscript import build_cast_module

# The model repository's builders are imported as `builders` (scripts/), as the tests do.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from builders.torch_resnet import ResNet18


def _rate(run: Callable[[], torch.Tensor], batch: int, seconds: float) -> float:
    done, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        run()
        done += batch
    return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    args = parse_with_smoke(parser, {"rounds": 1, "seconds": 0.5})
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="bf16-") as scratch:
        source, variant = Path(scratch) / "model.pt", Path(scratch) / "model.bf16.pt"
        torch.jit.script(ResNet18().eval()).save(str(source))
        build_cast_module(source, variant, "bf16")
        models = {"fp32": torch.jit.load(str(source)), "bf16": torch.jit.load(str(variant))}
    images = torch.rand(args.batch, 3, args.size, args.size)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}, native bf16: {native_bf16()}; "
        f"batch {args.batch} x 3 x {args.size} x {args.size}"
    )
    rates: dict[str, list[float]] = {name: [] for name in models}
    with torch.inference_mode():
        for model in models.values():  # warm-up: the profiling executor's first runs
            _rate(functools.partial(model, images), args.batch, args.seconds)
        for round_number in range(1, args.rounds + 1):
            for name, model in models.items():
                rate = _rate(functools.partial(model, images), args.batch, args.seconds)
                rates[name].append(rate)
                print(f"round {round_number} {name}: {rate:.1f} images/s")
    fp32, bf16 = (statistics.median(rates[n]) for n in ("fp32", "bf16"))
    for name in models:
        print(
            f"{name}: median {statistics.median(rates[name]):.1f} images/s, "
            f"range {min(rates[name]):.1f}-{max(rates[name]):.1f}"
        )
    # Each round's bf16 against the fp32 measured just before it: the load of the moment
    # weighs on both.
    paired = [b / f for b, f in zip(rates["bf16"], rates["fp32"], strict=True)]
    print(
        f"bf16 / fp32: ratio of the medians {bf16 / fp32:.2f}x; per round "
        f"{', '.join(f'{r:.2f}' for r in paired)} (median {statistics.median(paired):.2f}x, "
        f"range {min(paired):.2f}-{max(paired):.2f}x)"
    )
    record = {
        **header("torch_bf16"),
        "settings": {
            "rounds": args.rounds,
            "seconds": args.seconds,
            "batch": args.batch,
            "size": args.size,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "native_bf16": native_bf16(),
        },
        "images_per_s": rates,  # per precision, one figure a round in order
    }
    write_record("torch_bf16", record, args.output)


if __name__ == "__main__":
    main()

"""A TorchScript resnet18 model folder for the pytorch backend (the GPU check's tuning).

    python scripts/build_torchscript_resnet18.py REPOSITORY [--name resnet18_pt]

Writes REPOSITORY/NAME/1/model.pt (torchvision's resnet18 scripted where torchvision is
installed, else the same network from torch.nn; random weights) and a config as a user might
first write it: one CPU instance, dynamic batching up to 16, inputs and outputs in FP32.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from builders.torch_resnet import resnet18

CONFIG = """name: "{name}"
backend: "pytorch"
max_batch_size: 16
input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("--name", default="resnet18_pt")
    args = parser.parse_args()
    folder = args.repository / args.name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    model, source = resnet18()
    torch.jit.script(model).save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(CONFIG.format(name=args.name))
    print(f"{folder}: resnet18 from {source}, scripted")


if __name__ == "__main__":
    main()

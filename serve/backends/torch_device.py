"""A pytorch instance's traffic with its CUDA device: a stream of its own, and pinned host buffers
that a batch's inputs are written into once (each request's rows in their place, no
concatenation first) and copied to the device from asynchronously, and that its outputs come
back through.

Why: `.to("cuda")` from pageable memory goes through a driver staging buffer and holds the
calling thread; from pinned memory the copy is a DMA queued on the stream. One stream per
instance lets one instance's copies run while another's kernels do (on the default stream every
instance on the device would wait for every other). Everything an instance does on the device
(copies and forward) runs on its stream, so nothing reads a tensor before the stream has written
it; the host waits once a batch, for its outputs.

Buffers are kept per tensor name and grow to the largest batch seen. The next batch reuses them,
so a batch's output arrays are copied out before `download` returns.

torch is imported by the caller (the instance loads it); this module only uses it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """torch's dtype for a numpy dtype; TypeError when torch has none (e.g. object)."""
    import torch

    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


class DeviceFeed:
    """Moves one instance's batches to `device` and their outputs back. On a CUDA device: its own
    stream and pinned buffers; on the CPU (`pin=False`, for tests) the same buffers, plain."""

    def __init__(self, device: str, *, pin: bool = True) -> None:
        import torch

        self.device = torch.device(device)
        self._pin = pin
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._inputs: dict[str, torch.Tensor] = {}
        self._outputs: dict[str, torch.Tensor] = {}

    @contextmanager
    def on_stream(self) -> Iterator[None]:
        """Work issued inside runs on the instance's stream."""
        import torch

        if self.stream is None:
            yield
            return
        with torch.cuda.stream(self.stream):
            yield

    def upload(self, name: str, parts: Sequence[np.ndarray]) -> torch.Tensor:
        """`parts` (one request's array, or several requests' stacked along the first
        dimension) on the device, through the input's pinned buffer."""
        first = parts[0]
        if len(parts) == 1:
            shape: tuple[int, ...] = tuple(first.shape)
        else:
            shape = (sum(int(part.shape[0]) for part in parts), *first.shape[1:])
        host = self._buffer(self._inputs, name, shape, torch_dtype(first.dtype))
        staged = host.numpy()
        if len(parts) == 1:
            staged[...] = first
        else:
            offset = 0
            for part in parts:
                staged[offset : offset + part.shape[0]] = part
                offset += int(part.shape[0])
        with self.on_stream():
            return host.to(self.device, non_blocking=True)

    def download(self, values: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
        """The tensors as numpy arrays of their own: copied on the stream into the outputs'
        pinned buffers, waited for, and copied out of them (the next batch reuses them)."""
        hosts = {}
        with self.on_stream():
            for name, value in values.items():
                host = self._buffer(self._outputs, name, tuple(value.shape), value.dtype)
                host.copy_(value.detach(), non_blocking=True)
                hosts[name] = host
        if self.stream is not None:
            self.stream.synchronize()
        return {name: host.numpy().copy() for name, host in hosts.items()}

    def _buffer(
        self,
        buffers: dict[str, torch.Tensor],
        name: str,
        shape: tuple[int, ...],
        dtype: torch.dtype,
    ) -> torch.Tensor:
        """A view of `shape` on the tensor's buffer, grown (or remade for another dtype) when
        it is too small."""
        import torch

        size = math.prod(shape)
        buffer = buffers.get(name)
        if buffer is None or buffer.dtype != dtype or buffer.numel() < size:
            pin = self._pin and torch.cuda.is_available()
            buffer = torch.empty(max(size, 1), dtype=dtype, pin_memory=pin)
            buffers[name] = buffer
        return buffer[:size].view(shape)

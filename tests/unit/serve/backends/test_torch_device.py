"""DeviceFeed, the GPU instance's inputs and outputs through reused host buffers, exercised on the
CPU (no pinning, no stream): what a GPU run relies on besides CUDA itself, i.e. the requests'
rows stacked in order into one buffer, buffers reused and grown, outputs that the next batch's
reuse of the buffers leaves alone. On a GPU, tests/gpu serves TorchScript models through it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from serve.backends.torch_device import DeviceFeed, torch_dtype  # noqa: E402


def test_requests_rows_are_stacked_in_order_into_one_buffer() -> None:
    feed = DeviceFeed("cpu", pin=False)
    parts = [np.full((n, 3), n, dtype=np.float32) for n in (2, 1, 3)]
    stacked = feed.upload("x", parts)
    np.testing.assert_array_equal(stacked.numpy(), np.concatenate(parts))
    # One request: its array as it is, whatever its shape (an unbatched model's).
    single = feed.upload("y", [np.arange(6, dtype=np.int64).reshape(2, 3)])
    np.testing.assert_array_equal(single.numpy(), np.arange(6).reshape(2, 3))


def test_a_read_only_input_is_copied_into_the_buffer() -> None:
    feed = DeviceFeed("cpu", pin=False)
    frozen = np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), dtype=np.float32)
    tensor = feed.upload("x", [frozen.reshape(1, 4)])
    tensor.add_(1)  # a model may write in place: the request's bytes are not its memory
    np.testing.assert_array_equal(frozen, np.arange(4))


def test_buffers_are_reused_and_grow_to_the_largest_batch() -> None:
    feed = DeviceFeed("cpu", pin=False)
    first = feed.upload("x", [np.zeros((4, 2), np.float32)])
    smaller = feed.upload("x", [np.ones((2, 2), np.float32)])
    assert smaller.data_ptr() == first.data_ptr()  # the same memory, no new allocation
    larger = feed.upload("x", [np.ones((2, 2), np.float32)] * 4)
    assert larger.shape == (8, 2)
    again = feed.upload("x", [np.ones((3, 2), np.float32)])
    assert again.data_ptr() == larger.data_ptr()
    as_ints = feed.upload("x", [np.ones((3, 2), np.int32)])  # another dtype: its own buffer
    assert as_ints.dtype == torch.int32


def test_outputs_are_arrays_of_their_own() -> None:
    feed = DeviceFeed("cpu", pin=False)
    first = feed.download({"out": torch.arange(6, dtype=torch.float32).reshape(2, 3)})
    second = feed.download({"out": torch.full((2, 3), -1.0)})  # reuses the output buffer
    np.testing.assert_array_equal(first["out"], np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(second["out"], np.full((2, 3), -1.0))
    assert first["out"].dtype == np.float32


def test_a_dtype_torch_lacks_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        torch_dtype(np.dtype(object))

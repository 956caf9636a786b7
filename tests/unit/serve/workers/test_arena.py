"""The arenas that carry tensors between the core and its front-end processes."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from serve.workers.arena import (
    ALIGN,
    SHAPE_ONLY,
    ArenaReader,
    TensorArena,
    TensorPlace,
    read_tensors,
    write_tensors,
)


@pytest.fixture
def arena() -> TensorArena:
    made = TensorArena(segment_bytes=4096)
    yield made
    made.close()


def test_blocks_freed_in_any_order_merge_back_into_one_free_range(arena: TensorArena) -> None:
    blocks = [arena.take(1000) for _ in range(4)]  # 4 x 1024 (aligned): the segment is full
    assert len({b.segment for b in blocks}) == 1
    assert arena.in_use() == 4096
    for index in (2, 0, 3, 1):
        arena.free(blocks[index])
    assert arena.in_use() == 0
    whole = arena.take(4096)  # only one merged range can hold it
    assert (whole.segment, whole.offset) == (blocks[0].segment, 0)


def test_a_full_segment_is_followed_by_a_new_one_sized_for_the_block(arena: TensorArena) -> None:
    first = arena.take(4096)
    big = arena.take(10_000)
    assert big.segment != first.segment
    assert big.size == 10_048 and big.size % ALIGN == 0
    assert Path("/dev/shm", big.segment).stat().st_size == big.size


def test_close_removes_the_segments(arena: TensorArena) -> None:
    block = arena.take(10)
    arena.close()
    assert not Path("/dev/shm", block.segment).exists()


def test_tensors_are_read_in_place_where_they_were_written(arena: TensorArena) -> None:
    arrays = {
        "a": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.arange(6, dtype=np.int64)[::2],  # not contiguous
        "text": np.array([b"x", b"yz"], dtype=np.object_),
        "empty": np.zeros((0, 3), np.int8),
    }
    places, block = write_tensors(arrays, arena)
    places, block = pickle.loads(pickle.dumps((places, block)))  # as they travel
    read = read_tensors(places, block, ArenaReader(), copy=False)
    for name, array in arrays.items():
        assert read[name].dtype == array.dtype and read[name].tolist() == array.tolist()
    assert not read["a"].flags.writeable  # a view of the writer's block
    arena.view(block)[: arrays["a"].nbytes] = bytes(arrays["a"].nbytes)
    assert read["a"].sum() == 0  # the same memory


def test_copies_outlive_the_block(arena: TensorArena) -> None:
    places, block = write_tensors({"a": np.ones(4, np.float32)}, arena)
    copied = read_tensors(places, block, ArenaReader(), copy=True)
    arena.view(block)[:16] = bytes(16)
    assert copied["a"].tolist() == [1, 1, 1, 1]


def test_a_tensor_sent_to_a_client_region_arrives_as_its_shape_alone() -> None:
    place = TensorPlace("out", "<f4", (2, 3), SHAPE_ONLY)
    read = read_tensors([place], None, ArenaReader(), copy=True)
    assert read["out"].shape == (2, 3) and read["out"].dtype == np.float32

"""The shared-memory registry over a scratch directory standing in for /dev/shm."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from serve.errors import ErrorKind, ServeError
from serve.inference import RegionSlice
from serve.shared_memory.registry import SharedMemoryRegistry


@pytest.fixture
def shm_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def registry(shm_dir: Path) -> Iterator[SharedMemoryRegistry]:
    registry = SharedMemoryRegistry(shm_dir)
    yield registry
    registry.close()


def make_object(directory: Path, stem: str, content: bytes) -> Path:
    path = directory / stem
    path.write_bytes(content)
    return path


def mapped(path: Path) -> bool:
    """Whether this process maps `path` (from /proc/self/maps)."""
    maps = Path("/proc/self/maps").read_text()
    return any(line.endswith(str(path)) for line in maps.splitlines())


def test_register_status_read_and_write(registry: SharedMemoryRegistry, shm_dir: Path) -> None:
    path = make_object(shm_dir, "obj", bytes(range(256)) * 20)
    registry.register("a", "/obj", 100, 4000)  # not page-aligned: mapped from the page below
    registry.register("b", "/obj", 0, 16)
    assert registry.status() == [
        {"name": "a", "key": "/obj", "offset": 100, "byte_size": 4000},
        {"name": "b", "key": "/obj", "offset": 0, "byte_size": 16},
    ]
    assert registry.status("b") == [{"name": "b", "key": "/obj", "offset": 0, "byte_size": 16}]
    assert registry.read(RegionSlice("a", 2, 3), "input 'X'") == bytes([102, 103, 104])

    region = registry.acquire(RegionSlice("a", 0, 4), "output 'Y'")
    registry.write(region, 1, b"\xff\xfe", "output 'Y'")
    registry.release_region(region)
    assert path.read_bytes()[101:103] == b"\xff\xfe"


def test_unknown_region_is_not_found_with_tritons_message(registry: SharedMemoryRegistry) -> None:
    for call in (
        lambda: registry.status("nope"),
        lambda: registry.read(RegionSlice("nope", 0, 1), "input 'X'"),
    ):
        with pytest.raises(ServeError) as info:
            call()
        assert info.value.kind is ErrorKind.NOT_FOUND
        assert info.value.message == "Unable to find system shared memory region: 'nope'"


def test_a_name_registers_once(registry: SharedMemoryRegistry, shm_dir: Path) -> None:
    make_object(shm_dir, "obj", bytes(64))
    registry.register("r", "obj", 0, 64)
    with pytest.raises(ServeError) as info:
        registry.register("r", "obj", 0, 32)
    assert info.value.kind is ErrorKind.ALREADY_EXISTS
    assert "'r' already in manager" in info.value.message
    assert registry.status("r")[0]["byte_size"] == 64


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("/", "invalid shm key"),
        ("", "invalid shm key"),
        ("/../outside", "invalid shm key"),
        ("/dir/obj", "invalid shm key"),
        ("..", "invalid shm key"),
        ("/missing", "no such object"),
        ("/atpy123_abc_1", "reserved"),
    ],
)
def test_bad_key_is_refused_naming_region_and_key(
    registry: SharedMemoryRegistry, shm_dir: Path, key: str, fragment: str
) -> None:
    (shm_dir / "dir").mkdir()
    make_object(shm_dir / "dir", "obj", bytes(8))
    make_object(shm_dir.parent, "outside", bytes(8))
    make_object(shm_dir, "atpy123_abc_1", bytes(8))
    with pytest.raises(ServeError) as info:
        registry.register("r", key, 0, 8)
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT
    assert "'r'" in info.value.message
    assert fragment in info.value.message
    assert registry.status() == []


def test_a_link_out_of_the_directory_is_not_followed(
    registry: SharedMemoryRegistry, shm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    target = make_object(tmp_path_factory.mktemp("elsewhere"), "secret", bytes(8))
    (shm_dir / "link").symlink_to(target)
    with pytest.raises(ServeError, match="Unable to open shared memory region: '/link'"):
        registry.register("r", "/link", 0, 8)


@pytest.mark.parametrize(
    ("offset", "byte_size", "fragment"),
    [(0, 65, "exceeds the 64 bytes"), (60, 8, "exceeds"), (0, 0, "at least 1"), (-1, 8, "non")],
)
def test_range_beyond_the_object_is_refused(
    registry: SharedMemoryRegistry, shm_dir: Path, offset: int, byte_size: int, fragment: str
) -> None:
    make_object(shm_dir, "obj", bytes(64))
    with pytest.raises(ServeError) as info:
        registry.register("r", "/obj", offset, byte_size)
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT
    assert fragment in info.value.message


def test_ranges_outside_the_region_are_refused(
    registry: SharedMemoryRegistry, shm_dir: Path
) -> None:
    make_object(shm_dir, "obj", bytes(64))
    registry.register("r", "/obj", 0, 32)
    with pytest.raises(ServeError, match="offset 32 is outside shared memory region 'r'"):
        registry.read(RegionSlice("r", 32, 1), "input 'X'")
    with pytest.raises(ServeError, match="input 'X': offset 16 \\+ byte size 17 runs past"):
        registry.read(RegionSlice("r", 16, 17), "input 'X'")
    with pytest.raises(ServeError, match="output 'Y'"):
        registry.acquire(RegionSlice("r", 0, 33), "output 'Y'")


def test_unregister_unmaps_and_leaves_the_object(
    registry: SharedMemoryRegistry, shm_dir: Path
) -> None:
    path = make_object(shm_dir, "obj", bytes(64))
    registry.register("a", "/obj", 0, 64)
    registry.register("b", "/obj", 0, 8)
    assert mapped(path)
    registry.unregister("unknown")  # not an error, as in Triton
    registry.unregister("a")
    assert [r["name"] for r in registry.status()] == ["b"]
    registry.unregister()
    assert registry.status() == []
    assert not mapped(path)
    assert path.exists()


def test_unregister_waits_for_requests_holding_the_region(
    registry: SharedMemoryRegistry, shm_dir: Path
) -> None:
    path = make_object(shm_dir, "obj", bytes(64))
    registry.register("r", "/obj", 0, 64)
    region = registry.acquire(RegionSlice("r", 0, 4), "output 'Y'")
    registry.unregister("r")
    assert registry.status() == []
    registry.write(region, 0, b"done", "output 'Y'")  # the in-flight request still answers
    assert mapped(path)
    registry.release_region(region)
    assert not mapped(path)
    assert path.read_bytes()[:4] == b"done"


def test_a_truncated_object_is_an_error_not_a_crash(
    registry: SharedMemoryRegistry, shm_dir: Path
) -> None:
    path = make_object(shm_dir, "obj", bytes(2 * os.sysconf("SC_PAGE_SIZE")))
    registry.register("r", "/obj", 0, 2 * os.sysconf("SC_PAGE_SIZE"))
    os.truncate(path, 16)
    with pytest.raises(ServeError, match="'/obj' of region 'r' shrank"):
        registry.read(RegionSlice("r", 4096, 8), "input 'X'")

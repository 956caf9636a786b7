"""Triton's rate limiter (`--rate-limit execution_count`): an instance executes a batch only
while the resources its instance group's `rate_limiter` names are free, whichever model it
belongs to; priorities weight which waiting instance gets them first.

- Resources: each `rate_limiter { resources [{ name, count, global }] }` entry is what one
  execution of an instance of that group holds. A resource is per device (the instance's
  device id; CPU instances count as device 0, as they are placed here) unless `global`. How
  many of it exist comes from `--rate-limit-resource NAME:COUNT[:DEVICE]` (no device: every
  device), otherwise from the largest count any loaded instance needs, so that each can run.
- Priority: `rate_limiter { priority: N }` (0 or 1 the same): when resources come free, the
  waiting instances are offered them in order of the chances they had, each chance counting
  its priority, so an instance of priority 2 gets about half the chances of one of priority 1.
- `--rate-limit off` (tritonserver's default) ignores every `rate_limiter` block.

Schedulers ask `acquire` for an idle instance when they have a batch; one that gets nothing
waits (`wait`) and is called again when some instance releases its resources.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from serve.errors import ServeError

OFF = "off"
EXECUTION_COUNT = "execution_count"
MODES = (OFF, EXECUTION_COUNT)
ANY_DEVICE = -1  # in a --rate-limit-resource without a device: the count on every device


@dataclass(frozen=True, slots=True)
class ResourceCount:
    """`--rate-limit-resource NAME:COUNT[:DEVICE]`."""

    name: str
    count: int
    device: int = ANY_DEVICE

    @classmethod
    def parse(cls, text: str) -> ResourceCount:
        parts = text.split(":")
        try:
            if len(parts) not in (2, 3) or not parts[0]:
                raise ValueError
            count = int(parts[1])
            device = int(parts[2]) if len(parts) == 3 else ANY_DEVICE
        except ValueError:
            raise ServeError.invalid(
                f"--rate-limit-resource {text!r}: expected NAME:COUNT or NAME:COUNT:DEVICE"
            ) from None
        if count < 0 or (len(parts) == 3 and device < 0):
            raise ServeError.invalid(
                f"--rate-limit-resource {text!r}: the count and device cannot be negative"
            )
        return cls(parts[0], count, device)


@dataclass(frozen=True, slots=True)
class InstanceNeeds:
    """What one instance holds while it executes, where, and its priority."""

    resources: tuple[tuple[str, bool, int], ...]  # (name, global, count)
    device: int
    priority: int = 1

    @classmethod
    def of(cls, group: mc.ModelInstanceGroup, device: int) -> InstanceNeeds:
        limiter = group.rate_limiter
        # `global` is a Python keyword: the proto field is read by name.
        resources = tuple((r.name, bool(getattr(r, "global")), r.count) for r in limiter.resources)
        return cls(resources, device, max(1, limiter.priority))

    def held(self) -> list[tuple[tuple[str, int], int]]:
        """((resource, device or ANY_DEVICE for a global one), count) pairs."""
        return [
            ((name, ANY_DEVICE if is_global else self.device), count)
            for name, is_global, count in self.resources
        ]


class RateLimiter:
    """The server's resources and who waits for them; used on the event loop's thread only."""

    def __init__(self, mode: str = OFF, declared: Sequence[ResourceCount] = ()) -> None:
        if mode not in MODES:
            raise ServeError.invalid(f"--rate-limit {mode!r}: one of {', '.join(MODES)}")
        self.mode = mode
        self._declared = {(r.name, r.device): r.count for r in declared}
        self._needed: dict[tuple[str, int], int] = {}  # the largest count any instance needs
        self._in_use: dict[tuple[str, int], int] = {}
        self._chances: dict[object, int] = {}  # holder -> priority-weighted grants so far
        self._waiting: dict[Callable[[], None], int] = {}  # wake-up -> its best chance count

    @property
    def enabled(self) -> bool:
        return self.mode == EXECUTION_COUNT

    def admit(self, needs: InstanceNeeds) -> None:
        """Account for a loaded instance: the counts it needs exist at least once."""
        for key, count in needs.held():
            self._needed[key] = max(self._needed.get(key, 0), count)

    def available(self, key: tuple[str, int]) -> int:
        name, device = key
        for declared in ((name, device), (name, ANY_DEVICE)):
            if declared in self._declared:
                return self._declared[declared]
        return self._needed.get(key, 0)

    def acquire(self, holders: Sequence[tuple[object, InstanceNeeds]]) -> object | None:
        """Of `holders` (idle instances and their needs), the one with the fewest weighted
        chances whose resources are all free now, its resources taken; None when none."""
        ordered = sorted(holders, key=lambda holder: self._chances.get(holder[0], 0))
        for holder, needs in ordered:
            keys = needs.held()
            if all(self._in_use.get(key, 0) + count <= self.available(key) for key, count in keys):
                for key, count in keys:
                    self._in_use[key] = self._in_use.get(key, 0) + count
                self._chances[holder] = self._chances.get(holder, 0) + needs.priority
                return holder
        return None

    def chances(self, holders: Sequence[tuple[object, InstanceNeeds]]) -> int:
        return min((self._chances.get(holder, 0) for holder, _ in holders), default=0)

    def wait(self, wake: Callable[[], None], chances: int) -> None:
        """Call `wake()` once resources are released (those with fewer chances first)."""
        self._waiting[wake] = chances

    def release(self, needs: InstanceNeeds) -> None:
        for key, count in needs.held():
            self._in_use[key] = max(0, self._in_use.get(key, 0) - count)
        waiting = sorted(self._waiting.items(), key=lambda item: item[1])
        self._waiting.clear()
        for wake, _ in waiting:
            wake()

"""The rate limiter's accounting: resources per device unless global, counts from the flag or
from the largest need, priorities weighting who gets freed resources, waiters woken on release
(fewest chances first), and the flags refused when malformed."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.errors import ServeError
from serve.scheduler.rate_limiter import InstanceNeeds, RateLimiter, ResourceCount


def _needs(text: str, device: int = 0) -> InstanceNeeds:
    group = text_format.Parse(f"rate_limiter {{ {text} }}", mc.ModelInstanceGroup())
    return InstanceNeeds.of(group, device)


def test_a_group_reads_as_what_each_instance_holds() -> None:
    needs = _needs('resources [{ name: "R" count: 2 }, { name: "G" global: true count: 1 }]', 1)
    assert needs.held() == [(("R", 1), 2), (("G", -1), 1)]
    assert needs.priority == 1 and _needs("priority: 3").priority == 3


def test_a_resource_per_device_is_counted_on_each_device() -> None:
    limiter = RateLimiter("execution_count")
    on_0, on_1 = (
        _needs('resources [{ name: "R" count: 1 }]', 0),
        _needs('resources [{ name: "R" count: 1 }]', 1),
    )
    for needs in (on_0, on_1):
        limiter.admit(needs)
    assert limiter.acquire([("a", on_0)]) == "a"
    assert limiter.acquire([("b", on_0)]) is None  # device 0's one R is held
    assert limiter.acquire([("c", on_1)]) == "c"  # device 1 has its own
    limiter.release(on_0)
    assert limiter.acquire([("b", on_0)]) == "b"


def test_a_declared_count_overrides_the_largest_need() -> None:
    needs = _needs('resources [{ name: "R" global: true count: 1 }]')
    limiter = RateLimiter("execution_count", [ResourceCount("R", 2)])
    limiter.admit(needs)
    assert [limiter.acquire([(n, needs)]) for n in "abc"] == ["a", "b", None]


def test_priorities_weight_the_grants_and_waiters_wake_on_release() -> None:
    urgent, patient = (
        _needs('resources [{ name: "R" count: 1 }] priority: 1'),
        _needs('resources [{ name: "R" count: 1 }] priority: 2'),
    )
    limiter = RateLimiter("execution_count")
    limiter.admit(urgent)
    grants = []
    for _ in range(6):
        holder = limiter.acquire([("patient", patient), ("urgent", urgent)])
        grants.append(holder)
        limiter.release(urgent if holder == "urgent" else patient)
    assert grants.count("urgent") == 4 and grants.count("patient") == 2  # 2:1 for priority 1:2
    woken: list[str] = []
    assert limiter.acquire([("urgent", urgent)]) == "urgent"
    limiter.wait(lambda: woken.append("late"), chances=9)
    limiter.wait(lambda: woken.append("early"), chances=1)
    limiter.release(urgent)
    assert woken == ["early", "late"]


def test_malformed_flags_are_refused_naming_them() -> None:
    assert ResourceCount.parse("R:4:1") == ResourceCount("R", 4, 1)
    for bad in ("R", "R:x", ":1", "R:1:-1", "R:-1"):
        with pytest.raises(ServeError, match="--rate-limit-resource"):
            ResourceCount.parse(bad)
    with pytest.raises(ServeError, match="--rate-limit 'on'"):
        RateLimiter("on")

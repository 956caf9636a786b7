"""Restricted APIs: the flag's form, and which API group each HTTP path and gRPC method is."""

from __future__ import annotations

import pytest

from serve.restricted import GRPC_METHOD_GROUPS, RestrictedApis, http_api_group


@pytest.mark.parametrize(
    ("path", "group"),
    [
        ("/v2/health/live", "health"),
        ("/v2/health/ready", "health"),
        ("/v2", "metadata"),
        ("/v2/models/simple", "metadata"),
        ("/v2/models/simple/versions/1", "metadata"),
        ("/v2/models/simple/ready", "health"),
        ("/v2/models/simple/versions/1/ready", "health"),
        ("/v2/models/simple/config", "model-config"),
        ("/v2/models/simple/infer", "inference"),
        ("/v2/models/simple/versions/2/infer", "inference"),
        ("/v2/models/simple/generate", "inference"),
        ("/v2/models/stats", "statistics"),
        ("/v2/models/simple/stats", "statistics"),
        ("/v2/models/simple/versions/1/stats", "statistics"),
        ("/v2/models/simple/trace/setting", "trace"),
        ("/v2/trace/setting", "trace"),
        ("/v2/logging", "logging"),
        ("/v2/repository/index", "model-repository"),
        ("/v2/repository/models/simple/load", "model-repository"),
        ("/v2/systemsharedmemory/status", "shared-memory"),
        ("/v2/cudasharedmemory/region/r/register", "shared-memory"),
    ],
)
def test_each_http_route_belongs_to_its_group(path: str, group: str) -> None:
    assert http_api_group(path) == group


def test_every_grpc_method_has_a_group() -> None:
    from tritonclient.grpc import service_pb2 as pb

    methods = {m.name for m in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods}
    assert methods == set(GRPC_METHOD_GROUPS)


def test_parse_groups_and_keys() -> None:
    apis = RestrictedApis.parse(
        ["model-repository,shared-memory:Admin-Key=s3cret", "inference:user=u"], "--flag"
    )
    repository = apis.for_http("/v2/repository/index")
    assert repository is not None and repository.key == "admin-key"
    assert repository.allows(b"s3cret") and not repository.allows(b"wrong")
    assert not repository.allows(None)
    assert apis.for_grpc("/inference.GRPCInferenceService/SystemSharedMemoryRegister") is repository
    assert apis.for_grpc("ModelInfer") is not None
    assert apis.for_http("/v2/health/live") is None
    assert (
        apis.describe() == "model-repository, shared-memory need 'admin-key'; inference need 'user'"
    )
    assert not RestrictedApis.parse([], "--flag")


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("model-repository", "expected <api>"),
        ("model-repository:key", "expected <api>"),
        (":key=value", "expected <api>"),
        ("model-repository:=value", "expected <api>"),
        ("repository:key=value", "unknown API 'repository'"),
    ],
)
def test_malformed_specs_name_the_flag_and_value(spec: str, problem: str) -> None:
    with pytest.raises(ValueError) as refused:
        RestrictedApis.parse([spec], "--http-restricted-api")
    assert problem in str(refused.value) and "--http-restricted-api" in str(refused.value)


def test_an_api_restricted_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="'inference' is restricted more than once"):
        RestrictedApis.parse(["inference:a=1", "health,inference:b=2"], "--flag")

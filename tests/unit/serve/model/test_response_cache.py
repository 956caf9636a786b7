"""The response cache on its own: `--cache-config` read as tritonserver reads it, keys that
change with what Triton hashes and only with that, byte-bounded LRU eviction, and Triton's
refusal (in its words) of a sequence-batched or decoupled model that enables the cache."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import ProducedOutputs
from serve.config.validate import validate_config
from serve.errors import ServeError
from serve.inference import InferRequest, RequestedOutput
from serve.model.response_cache import (
    CacheSettings,
    ResponseCache,
    parse_cache_config,
    request_key,
)


def _request(values: np.ndarray, **kwargs: object) -> InferRequest:
    return InferRequest("m", "", {"X": values}, {"X": "INT32"}, **kwargs)  # type: ignore[arg-type]


def test_cache_config_reads_as_tritonservers() -> None:
    assert parse_cache_config([]) is None
    assert parse_cache_config(["local,size=1048576"]) == CacheSettings(1048576)
    assert parse_cache_config(["local,size=0"]) is None  # size 0: no cache
    for bad, says in (
        (["redis,host=h"], "cache 'redis' is not available here"),
        (["local"], "expected <cache>,<key>=<value>"),
        (["local,size=big"], "the size is a number of bytes"),
        (["local,size=1", "local,ttl=3"], "takes 'size' only, not ttl"),
    ):
        with pytest.raises(ServeError, match=says):
            parse_cache_config(bad)


def test_the_key_follows_model_version_and_inputs_not_parameters_or_outputs() -> None:
    a = np.arange(4, dtype=np.int32).reshape(1, 4)
    key = request_key("m", "1", _request(a))
    assert key == request_key("m", "1", _request(a.copy()))
    assert key == request_key(
        "m",
        "1",
        _request(a, parameters={"priority": 2}, requested_outputs=[RequestedOutput("Y")]),
    )
    assert key != request_key("m", "2", _request(a))
    assert key != request_key("n", "1", _request(a))
    assert key != request_key("m", "1", _request(a.reshape(2, 2)))
    assert key != request_key("m", "1", _request(a + 1))
    bytes_key = request_key("m", "1", _request(np.array([[b"ab", b"c"]], dtype=object)))
    assert bytes_key != request_key("m", "1", _request(np.array([[b"a", b"bc"]], dtype=object)))


def test_an_input_not_in_host_memory_is_not_hashed() -> None:
    class DeviceArray:  # what a CUDA shared-memory input is: not a numpy array
        shape = (1, 4)

    assert request_key("m", "1", _request(DeviceArray())) is None  # type: ignore[arg-type]


def test_entries_are_kept_within_the_size_least_recently_used_first_out() -> None:
    one_kib = {"Y": np.zeros(256, dtype=np.float32)}
    cache = ResponseCache(CacheSettings(3 * 1024))
    for key in (b"a", b"b"):
        cache.insert(key, one_kib)
    assert cache.lookup(b"a") is not None  # a is now the most recently used
    cache.insert(b"c", one_kib)
    assert cache.entries == 2 and cache.counters.evictions == 1
    assert cache.lookup(b"b") is None and cache.lookup(b"a") is not None
    cache.insert(b"huge", {"Y": np.zeros(4096, dtype=np.float32)})  # larger than the cache
    assert cache.lookup(b"huge") is None and cache.entries == 2
    assert 0 < cache.utilization <= 1
    assert (cache.counters.hits, cache.counters.misses) == (2, 2)


def test_an_entry_is_a_frozen_copy_with_its_response_parameters() -> None:
    produced = ProducedOutputs({"Y": np.ones(3, dtype=np.float32)}, {"tokens": 3})
    cache = ResponseCache(CacheSettings(1 << 20))
    cache.insert(b"k", produced)
    produced["Y"][0] = 7  # the model's buffer changes later: the entry does not
    found = cache.lookup(b"k")
    assert isinstance(found, ProducedOutputs) and found.parameters == {"tokens": 3}
    assert found["Y"][0] == 1 and not found["Y"].flags.writeable


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            "sequence_batching { }",
            "Response Cache does not currently support model m with sequence batching "
            "scheduler. Please disable the response cache.",
        ),
        (
            "model_transaction_policy { decoupled: true }",
            "Response Cache does not currently support model m with 'decoupled' transaction "
            "policy. Please disable the response cache.",
        ),
    ],
)
def test_sequence_and_decoupled_models_refuse_the_cache_in_tritons_words(
    extra: str, words: str
) -> None:
    config = text_format.Parse(
        f"""name: "m" backend: "python" max_batch_size: 4
        input [{{ name: "X" data_type: TYPE_INT32 dims: [1] }}]
        output [{{ name: "Y" data_type: TYPE_INT32 dims: [1] }}]
        {extra}
        response_cache {{ enable: true }}""",
        mc.ModelConfig(),
    )
    with pytest.raises(ServeError) as error:
        validate_config(config, "m/config.pbtxt", "m")
    assert str(error.value) == f"m/config.pbtxt: response_cache: {words}"
    config.response_cache.enable = False
    validate_config(config, "m/config.pbtxt", "m")

"""Request rescheduling in the python backend: pb_utils' set_release_flags, the stub's report in
Results, and the instance's Rescheduled results (a real stub process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.backends.base import BatchTimes, Rescheduled
from serve.backends.python import pb_utils
from serve.backends.python.protocol import ResponseMsg, Results, decode, encode
from serve.errors import ErrorKind, ServeError
from tests.unit.serve.backends.test_python_backend import add_sub_request, make_instance

pytestmark = pytest.mark.timeout(120)


def test_release_flags_are_tritons() -> None:
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2
    request = pb_utils.InferenceRequest()
    assert not request._rescheduled()
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert request._rescheduled()
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
    assert not request._rescheduled()


@pytest.mark.parametrize("flags", [-1, 1 << 32, "2", 2.0, None])
def test_set_release_flags_takes_an_unsigned_32_bit_integer(flags: object) -> None:
    with pytest.raises(TypeError, match="set_release_flags\\(\\): incompatible function"):
        pb_utils.InferenceRequest().set_release_flags(flags)  # type: ignore[arg-type]


def test_results_carry_the_rescheduled_requests() -> None:
    message = Results([ResponseMsg([]), ResponseMsg([])], rescheduled=(1,))
    assert decode(encode(message)) == message
    assert decode(encode(Results([]))).rescheduled == ()


SOURCE = """
import triton_python_backend_utils as pb_utils

RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            answer = pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", a), pb_utils.Tensor("OUTPUT1", a)])
            if a[0, 0] == 1:
                request.set_release_flags(RESCHEDULE)
                responses.append(None)
            elif a[0, 0] == 2:
                request.set_release_flags(RESCHEDULE)  # and a response: misuse
                responses.append(answer)
            else:
                responses.append(answer)
        return responses
"""


def test_the_instance_answers_rescheduled_requests_rescheduled(tmp_path: Path) -> None:
    instance = make_instance(tmp_path, SOURCE)
    instance.load()
    try:
        requests = [add_sub_request(1, start=s) for s in (1, 2, 5)]
        rescheduled, misused, answered = instance.execute(requests, BatchTimes())
    finally:
        instance.unload()
    assert isinstance(rescheduled, Rescheduled)
    assert type(misused) is ServeError and misused.kind is ErrorKind.INTERNAL
    assert misused.message.startswith(
        "add_sub_py: Expected a None object in the execute function return list for "
        "rescheduled request, found type '<class "
    )
    assert isinstance(answered, dict) and answered["OUTPUT0"][0, 0] == 5

"""A server on the example pipelines (and the models they compose) for this folder's tests, and
one way to call it through tritonclient over HTTP or gRPC."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.server_process import RunningServer, start_server, stop_server

PIPELINE_MODELS = (
    "digits",
    "digits_preprocess",
    "digits_postprocess",
    "digits_pipeline",
    "minilm_tokenizer",
    "minilm_encoder",
    "minilm_pooling",
    "text_embedding",
)
PROTOCOLS = ("http", "grpc")
Inputs = dict[str, tuple[np.ndarray, str]]  # name -> (array, Triton datatype)


def _link_large(src: str, dst: str) -> None:
    if Path(src).stat().st_size > 1_000_000:
        Path(dst).symlink_to(Path(src).resolve())
    else:
        shutil.copy2(src, dst)


@pytest.fixture(scope="package")
def pipeline_server(
    bundled_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("pipelines")
    repository = root / "model_repository"
    for model in PIPELINE_MODELS:
        shutil.copytree(bundled_repository / model, repository / model, copy_function=_link_large)
    server = start_server(repository, root / "server.log")
    try:
        yield server
    finally:
        stop_server(server)


class PipelineClient:
    """tritonclient's HTTP or gRPC client behind one call: `infer(model, inputs, outputs)`."""

    def __init__(self, protocol: str, server: RunningServer) -> None:
        self.protocol = protocol
        self.module = httpclient if protocol == "http" else grpcclient
        url = server.url if protocol == "http" else server.grpc_url
        if protocol == "http":
            self.client = httpclient.InferenceServerClient(url, concurrency=16)
        else:
            self.client = grpcclient.InferenceServerClient(url)

    def close(self) -> None:
        self.client.close()

    def _request(self, inputs: Inputs, outputs: Sequence[str]) -> tuple[list, list]:
        infer_inputs = []
        for name, (array, datatype) in inputs.items():
            infer_input = self.module.InferInput(name, list(array.shape), datatype)
            infer_input.set_data_from_numpy(array)
            infer_inputs.append(infer_input)
        return infer_inputs, [self.module.InferRequestedOutput(n) for n in outputs]

    def infer(self, model: str, inputs: Inputs, outputs: Sequence[str]) -> dict[str, np.ndarray]:
        infer_inputs, requested = self._request(inputs, outputs)
        result = self.client.infer(model, infer_inputs, outputs=requested)
        return {name: result.as_numpy(name) for name in outputs}

    def infer_concurrently(
        self, model: str, requests: Sequence[Inputs], outputs: Sequence[str]
    ) -> list[dict[str, np.ndarray]]:
        """All `requests` in flight at once (so the server may batch them); answers in order."""
        if self.protocol == "http":
            pending = []
            for request in requests:
                infer_inputs, requested = self._request(request, outputs)
                pending.append(self.client.async_infer(model, infer_inputs, outputs=requested))
            results = [p.get_result(timeout=120) for p in pending]
        else:
            results = [None] * len(requests)
            errors: list[Exception] = []
            done = threading.Semaphore(0)

            def callback(index: int, result: object, error: Exception | None) -> None:
                if error is not None:
                    errors.append(error)
                results[index] = result
                done.release()

            for index, request in enumerate(requests):
                infer_inputs, requested = self._request(request, outputs)
                self.client.async_infer(
                    model,
                    infer_inputs,
                    lambda result, error, i=index: callback(i, result, error),
                    outputs=requested,
                    client_timeout=120,
                )
            for _ in requests:
                assert done.acquire(timeout=150), "an asynchronous request never completed"
            if errors:
                raise errors[0]
        return [{name: r.as_numpy(name) for name in outputs} for r in results]


@pytest.fixture(params=PROTOCOLS)
def pipeline_client(
    request: pytest.FixtureRequest, pipeline_server: RunningServer
) -> Iterator[PipelineClient]:
    client = PipelineClient(request.param, pipeline_server)
    try:
        yield client
    finally:
        client.close()

"""From perf_analyzer-style options to a load driver ready to start.

`connect` asks the server what the model is (server metadata, model metadata, model config)
over the chosen protocol (HTTP or gRPC), sets up shared memory when asked, builds every
request once, and picks the in-process driver or worker processes.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from analyzer.ensembles import composing_models, is_sequence_model
from analyzer.errors import AnalyzerError
from analyzer.inputs import build_input_sets, build_input_streams
from analyzer.load.base import LoadDriver, LoadLevel
from analyzer.load.connectors import GRPC, GRPC_STREAM, HTTP
from analyzer.load.local import AsyncLoadDriver, InferTarget
from analyzer.load.options import LoadOptions, ModelInfo
from analyzer.load.process import ProcessDriver
from analyzer.load.schedule import ScheduleSpec, check_distribution, check_intervals
from analyzer.load.sequence_requests import GrpcStepFramer, HttpStepFramer, SequenceSource
from analyzer.load.sequences import check_sequence_options
from analyzer.load.shared_memory import (
    SharedMemoryRefs,
    SystemSharedMemory,
    create_system_shared_memory,
)
from common.gpu import list_gpus
from protocol.client.control import ControlClient, open_client
from protocol.client.grpc import metadata_pairs
from protocol.client.grpc_infer import encode_grpc_infer_request
from protocol.client.http import build_infer_request
from protocol.client.infer_body import InferInput, encode_infer_body
from protocol.errors import ClientError, ProtocolError
from protocol.metadata import ModelMetadata

# Past these a load is spread over worker processes when LoadOptions.worker_processes is 0.
# Measured here (2 cores, against a no-op server): one process sustains ~20,000 requests/s in
# request-rate mode and ~48,000/s at concurrency 8 (benchmarks/analyzer_client_cost.py gives
# the cost against the real server: ~35 us CPU per request, perf_analyzer ~70-100 us).
RATE_PER_PROCESS = 15_000.0
CONCURRENCY_PER_PROCESS = 512

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_TENSOR_FORMATS = ("binary", "json")
_PROTOCOLS = ("http", "grpc")


@dataclass(slots=True)
class Connected:
    """What `connect` made: the driver (not started), the model as the server describes it,
    the control client (for statistics) and the run's shared memory regions, if any.
    `close()` releases the regions and closes the client."""

    driver: LoadDriver
    model: ModelInfo
    client: ControlClient
    shared_memory: SystemSharedMemory | None = None

    async def close(self) -> list[str]:
        """Release everything; the problems met (a region the server would not unregister)."""
        try:
            if self.shared_memory is None:
                return []
            return await self.shared_memory.release()
        finally:
            await self.client.close()


async def connect(options: LoadOptions, peak: LoadLevel | None = None) -> Connected:
    """A driver ready to `start()` and what goes with it (the caller closes it). `peak` is
    the highest level the caller will ask for; with `options.worker_processes == 0` it
    decides whether worker processes are needed."""
    check_options(options)
    try:
        client = open_client(options.protocol, options.url, options.headers)
    except ClientError as exc:
        raise AnalyzerError(f"-u {exc}") from None
    regions: SystemSharedMemory | None = None
    try:
        try:
            await client.server_metadata()
            metadata = await client.model_metadata(options.model, options.version)
            config = await client.model_config(options.model, options.version)
        except ClientError as exc:
            raise AnalyzerError(str(exc)) from None
        model = model_info(metadata, config, options.version)
        composing = await composing_models(client, config)
        model = replace(model, composing=composing, sequence=is_sequence_model(config, composing))
        if model.sequence:
            target = build_sequence_target(client, model, options)
            return Connected(make_driver(target, options, peak), model, client)
        input_sets = build_input_sets(model, options)
        refs: list[SharedMemoryRefs] | None = None
        if options.shared_memory in ("system", "cuda"):
            outputs = [tensor.name for tensor in model.outputs]
            regions, refs = await create_system_shared_memory(
                client,
                input_sets,
                outputs,
                options.output_shared_memory_size,
                options.shared_memory,
            )
        target = build_target(client, model, options, input_sets, refs)
        driver = make_driver(target, options, peak)
    except BaseException:
        if regions is not None:
            await regions.release()
        await client.close()
        raise
    return Connected(driver, model, client, regions)


def check_options(options: LoadOptions) -> None:
    """The options this analyzer cannot honour, refused before contacting the server."""
    if options.protocol not in _PROTOCOLS:
        raise AnalyzerError(f"-i must be http or grpc, got '{options.protocol}'")
    if options.streaming and options.protocol != "grpc":
        raise AnalyzerError("--streaming needs -i grpc (streams are a gRPC feature)")
    if options.shared_memory not in ("none", "system", "cuda"):
        raise AnalyzerError(
            f"--shared-memory must be none, system or cuda, got '{options.shared_memory}'"
        )
    if options.shared_memory == "cuda" and not list_gpus():
        raise AnalyzerError(
            "--shared-memory cuda puts the tensors in GPU memory shared with the server, and "
            "NVML finds no GPU on this machine: use --shared-memory system or none"
        )
    if options.shared_memory != "none" and options.output_shared_memory_size < 1:
        raise AnalyzerError(
            "--output-shared-memory-size must be at least 1 byte, got"
            f" {options.output_shared_memory_size}"
        )
    for flag, value in (
        ("--input-tensor-format", options.input_tensor_format),
        ("--output-tensor-format", options.output_tensor_format),
    ):
        if value not in _TENSOR_FORMATS:
            raise AnalyzerError(f"{flag} must be binary or json, got '{value}'")
    check_distribution(options.request_distribution)
    if options.request_intervals_us is not None:
        check_intervals(options.request_intervals_us, "--request-intervals")
    if options.worker_processes < 0:
        raise AnalyzerError(
            f"worker processes must be 0 (auto) or more, got {options.worker_processes}"
        )
    if options.max_connections < max(1, options.worker_processes):
        raise AnalyzerError(
            f"the connection cap must allow at least one connection per worker process, got"
            f" {options.max_connections}"
        )


def model_info(metadata: dict[str, Any], config: dict[str, Any], version: str) -> ModelInfo:
    """The model from its metadata (tensors, batch dim included) and config."""
    try:
        parsed = ModelMetadata.from_json(metadata)
    except ProtocolError as exc:
        raise AnalyzerError(str(exc)) from None
    versions = parsed.versions
    if not version and versions:
        version = max(versions, key=lambda v: (v.isdigit(), int(v) if v.isdigit() else 0, v))
    max_batch_size = config.get("max_batch_size", 0)
    if not isinstance(max_batch_size, int):
        raise AnalyzerError(f"the config of model '{parsed.name}' has no integer max_batch_size")
    return ModelInfo(
        name=parsed.name,
        version=version,
        max_batch_size=max_batch_size,
        inputs=parsed.inputs,
        outputs=parsed.outputs,
        config=config,
    )


def build_target(
    client: ControlClient,
    model: ModelInfo,
    options: LoadOptions,
    input_sets: Sequence[Sequence[InferInput]],
    shared_memory: Sequence[SharedMemoryRefs] | None = None,
) -> InferTarget:
    """Every distinct request, framed once (per input set; `shared_memory`, per input set,
    the regions its tensors lie in)."""
    outputs = [tensor.name for tensor in model.outputs]
    refs: Sequence[SharedMemoryRefs | None] = (
        shared_memory if shared_memory is not None else [None] * len(input_sets)
    )
    if options.protocol == "grpc":
        requests = [
            encode_grpc_infer_request(options.model, options.version, inputs, outputs, regions)
            for inputs, regions in zip(input_sets, refs, strict=True)
        ]
        transport = GRPC_STREAM if options.streaming else GRPC
        return InferTarget(
            client.endpoint, tuple(requests), transport, metadata_pairs(options.headers)
        )
    http_requests = []
    for inputs, regions in zip(input_sets, refs, strict=True):
        try:
            body, header_length = encode_infer_body(
                inputs,
                outputs,
                binary_inputs=options.input_tensor_format == "binary",
                binary_outputs=options.output_tensor_format == "binary",
                shared_memory=regions,
            )
        except ProtocolError as exc:
            raise AnalyzerError(f"{exc}: use --input-tensor-format binary") from None
        http_requests.append(
            build_infer_request(
                client.endpoint,
                options.model,
                options.version,
                body,
                header_length,
                options.headers,
            )
        )
    return InferTarget(client.endpoint, tuple(http_requests), HTTP)


def build_sequence_target(
    client: ControlClient, model: ModelInfo, options: LoadOptions
) -> InferTarget:
    """A sequence model's target: each data step framed once, without its parameters."""
    if options.shared_memory != "none":
        raise AnalyzerError(
            f"--shared-memory {options.shared_memory} is not supported for sequence model"
            f" '{model.name}': use --shared-memory none"
        )
    if options.worker_processes > 1:
        raise AnalyzerError(
            f"--workers {options.worker_processes}: a sequence model's load runs in one"
            " process (each sequence's requests in order); use --workers 1 or 0"
        )
    check_sequence_options(options.sequence)
    streams = build_input_streams(model, options)
    outputs = [tensor.name for tensor in model.outputs]
    framer: GrpcStepFramer | HttpStepFramer
    if options.protocol == "grpc":
        framer = GrpcStepFramer(
            tuple(
                tuple(
                    encode_grpc_infer_request(options.model, options.version, step, outputs)
                    for step in stream
                )
                for stream in streams
            )
        )
        transport = GRPC_STREAM if options.streaming else GRPC
        metadata = metadata_pairs(options.headers)
    else:
        payloads = []
        for stream in streams:
            framed = []
            for step in stream:
                try:
                    body, length = encode_infer_body(
                        step,
                        outputs,
                        binary_inputs=options.input_tensor_format == "binary",
                        binary_outputs=options.output_tensor_format == "binary",
                    )
                except ProtocolError as exc:
                    raise AnalyzerError(f"{exc}: use --input-tensor-format binary") from None
                cut = len(body) if length is None else length
                framed.append((body[:cut], body[cut:]))
            payloads.append(tuple(framed))
        framer = HttpStepFramer(
            client.endpoint, options.model, options.version, options.headers, tuple(payloads)
        )
        transport, metadata = HTTP, ()
    source = SequenceSource(
        framer=framer,
        stream_steps=tuple(len(stream) for stream in streams),
        data_given=options.input_data not in (["random"], ["zero"], []),
        options=options.sequence,
    )
    return InferTarget(client.endpoint, (), transport, metadata, sequences=source)


def make_driver(
    target: InferTarget, options: LoadOptions, peak: LoadLevel | None = None
) -> LoadDriver:
    """The in-process driver, or worker processes when `worker_count` asks for more than one
    (never more than the connection cap); a sequence model's load stays in this process."""
    schedule = ScheduleSpec(
        distribution=options.request_distribution,
        seed=options.seed,
        intervals_us=tuple(options.request_intervals_us)
        if options.request_intervals_us is not None
        else None,
    )
    workers = min(worker_count(options, peak), options.max_connections)
    if target.sequences is not None:
        workers = 1  # build_sequence_target refuses more
    if workers <= 1:
        return AsyncLoadDriver(target, schedule, max_connections=options.max_connections)
    return ProcessDriver(target, schedule, workers, max_connections=options.max_connections)


def worker_count(options: LoadOptions, peak: LoadLevel | None) -> int:
    """1 means this process; more means that many worker processes."""
    if options.worker_processes:
        return options.worker_processes
    if peak is None:
        return 1
    if peak.request_rate:
        need = math.ceil(peak.request_rate / RATE_PER_PROCESS)
    else:
        need = math.ceil(peak.concurrency / CONCURRENCY_PER_PROCESS)
    return max(1, min(os.cpu_count() or 1, need))


def parse_shape_flag(text: str) -> tuple[str, list[int]]:
    """`--shape NAME:d1,d2,...` (batch dim excluded) -> (NAME, [d1, d2, ...])."""
    name, colon, dims = text.rpartition(":")
    if not colon or not name:
        raise AnalyzerError(f"--shape '{text}': expected NAME:d1,d2,... (e.g. INPUT0:3,224,224)")
    try:
        shape = [int(d) for d in dims.split(",")] if dims.strip() else []
    except ValueError:
        raise AnalyzerError(f"--shape '{text}': the dims must be whole numbers") from None
    if not shape or any(d < 0 for d in shape):
        raise AnalyzerError(f"--shape '{text}': give one or more dims, each 0 or more")
    return name, shape


def parse_header_flag(text: str) -> tuple[str, str]:
    """`-H "Name: value"` -> (Name, value)."""
    name, colon, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not colon or not _TOKEN.match(name):
        raise AnalyzerError(f"-H '{text}': expected 'Name: value' with a valid header name")
    if "\r" in value or "\n" in value:
        raise AnalyzerError(f"-H '{text}': a header value cannot contain line breaks")
    if name.lower() in ("host", "content-length", "content-type", "transfer-encoding"):
        raise AnalyzerError(f"-H '{text}': the {name} header is set by the analyzer itself")
    return name, value

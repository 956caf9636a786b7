"""What the load generator needs to know, resolved from perf_analyzer-style flags."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analyzer.ensembles import ComposingModel
from analyzer.load.sequences import SequenceOptions
from protocol.metadata import TensorMetadata

# Connections one load may open: each outstanding request needs its own (no pipelining). In
# request-rate mode a request due while all of them are busy waits for one to free.
DEFAULT_MAX_CONNECTIONS = 4096


@dataclass(slots=True)
class LoadOptions:
    """Everything the factory needs to build a load: the server, the model, the request
    data and how it is sent (perf_analyzer's flag beside each field)."""

    url: str  # host:port of the server (perf_analyzer's -u)
    model: str  # -m
    version: str = ""  # -x; "" = the server's latest
    protocol: str = "http"  # -i http | grpc
    streaming: bool = False  # --streaming: gRPC bidirectional streams (one per connection)
    batch_size: int = 1  # -b
    input_data: list[str] = field(default_factory=lambda: ["random"])  # random | zero | paths
    shapes: dict[str, list[int]] = field(default_factory=dict)  # --shape NAME:d1,d2
    string_length: int = 128  # --string-length
    string_data: str | None = None  # --string-data
    headers: dict[str, str] = field(default_factory=dict)  # -H "Name: value"
    request_distribution: str = "constant"  # constant | poisson
    request_intervals_us: list[int] | None = None  # --request-intervals FILE (looped)
    sync: bool = False  # --sync / --async (perf_analyzer's default is sync)
    max_threads: int = 16  # --max-threads
    worker_processes: int = 0  # 0: decide from the load and the cores
    # Over all worker processes; a concurrency above it cannot be reached.
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    shared_memory: str = "none"  # none | system
    output_shared_memory_size: int = 102400
    output_tensor_format: str = "binary"  # binary | json
    input_tensor_format: str = "binary"  # binary | json
    seed: int = 0
    # --collect-metrics: the server's Prometheus endpoint (host:port/path) read every
    # `metrics_interval_ms` while measuring (None: not read)
    metrics_url: str | None = None
    metrics_interval_ms: int = 1000
    # Used when the model is a sequence model (sequence_batching, or an ensemble with a
    # stateful step).
    sequence: SequenceOptions = field(default_factory=SequenceOptions)


# A tensor as the model metadata describes it (name, wire datatype, shape with -1 for variable
# dims, batch dim included).
TensorInfo = TensorMetadata


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """The model as the server describes it (metadata and config)."""

    name: str
    version: str
    max_batch_size: int
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    config: dict[str, Any]  # the config JSON as the server prints it
    composing: tuple[ComposingModel, ...] = ()  # an ensemble's, depth first
    sequence: bool = False  # requests carry sequence ids and flags

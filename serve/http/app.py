"""KServe v2 REST with Triton's extensions: the control plane (health, metadata, configs,
statistics, the repository, shared memory, trace and log settings) on `serve.http.router`, and
the infer route, a plain ASGI handler in front of it (see `serve.http.infer_route`)."""

from __future__ import annotations

from typing import Any

import orjson

from serve.dataplane_api import DataPlaneApi
from serve.errors import ServeError
from serve.http.generate_route import add_generate_routes
from serve.http.infer_route import InferRoute
from serve.http.router import Answer, ControlRequest, Router
from serve.http.settings_codec import log_update, trace_response, trace_update

_JSON = b"application/json"
_OK = Answer()


def _json(content: Any) -> Answer:
    return Answer(200, orjson.dumps(content), _JSON)


def _flag(ok: bool) -> Answer:
    # Triton answers readiness and liveness with an empty 200, or 400 when not ready.
    return Answer(200 if ok else 400)


def _json_body(request: ControlRequest) -> dict[str, Any]:
    if not request.body.strip():
        return {}
    try:
        body = orjson.loads(request.body)
    except orjson.JSONDecodeError as exc:
        raise ServeError.invalid(f"malformed JSON in the request body: {exc}") from None
    if not isinstance(body, dict):
        raise ServeError.invalid("the request body must be a JSON object")
    return body


def build_control_plane(dataplane: DataPlaneApi) -> Router:
    """The router of every HTTP route but POST .../infer (health, metadata, configs, statistics,
    generate, the repository, trace and log settings, shared memory), each handler delegating to
    `dataplane`."""
    app = Router()

    async def server_metadata(_: ControlRequest) -> Answer:
        return _json(dataplane.server_metadata())

    async def live(_: ControlRequest) -> Answer:
        return _flag(dataplane.live())

    async def ready(_: ControlRequest) -> Answer:
        return _flag(dataplane.ready())

    async def stats(request: ControlRequest) -> Answer:
        return _json(dataplane.statistics(*request.params.values()))

    async def metadata(request: ControlRequest) -> Answer:
        return _json(dataplane.model_metadata(*request.params.values()))

    async def model_ready(request: ControlRequest) -> Answer:
        return _flag(dataplane.model_ready(*request.params.values()))

    async def config(request: ControlRequest) -> Answer:
        return _json(dataplane.model_config(*request.params.values()))

    async def repository_index(request: ControlRequest) -> Answer:
        return _json(dataplane.repository_index(bool(_json_body(request).get("ready", False))))

    async def load(request: ControlRequest) -> Answer:
        parameters = _json_body(request).get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ServeError.invalid("load 'parameters' must be a JSON object")
        await dataplane.load_model(request.params["model"], parameters)
        return _OK

    async def unload(request: ControlRequest) -> Answer:
        parameters = _json_body(request).get("parameters") or {}
        dependents = isinstance(parameters, dict) and parameters.get("unload_dependents") is True
        await dataplane.unload_model(request.params["model"], unload_dependents=dependents)
        return _OK

    version = "/versions/{version}"
    app.add("GET", "/v2", server_metadata)
    app.add("GET", "/v2/health/live", live)
    app.add("GET", "/v2/health/ready", ready)
    app.add("GET", "/v2/models/stats", stats)
    for suffix in ("", version):
        model = "/v2/models/{model}" + suffix
        app.add("GET", model, metadata)
        app.add("GET", model + "/ready", model_ready)
        app.add("GET", model + "/config", config)
        app.add("GET", model + "/stats", stats)
    add_generate_routes(app, dataplane)
    app.add("POST", "/v2/repository/index", repository_index)
    app.add("POST", "/v2/repository/models/{model}/load", load)
    app.add("POST", "/v2/repository/models/{model}/unload", unload)
    _add_shared_memory_routes(app, dataplane)
    _add_settings_routes(app, dataplane)
    return app


def _add_settings_routes(app: Router, dataplane: DataPlaneApi) -> None:
    """Triton's trace and logging extensions: GET reads, POST changes and answers the
    settings now in force."""

    async def trace(request: ControlRequest) -> Answer:
        update = trace_update(_json_body(request)) if request.method == "POST" else {}
        model = request.params.get("model", "")
        return _json(trace_response(dataplane.trace_setting(model, update)))

    async def logging_settings(request: ControlRequest) -> Answer:
        update = log_update(_json_body(request)) if request.method == "POST" else {}
        return _json(dataplane.log_settings(update))

    app.add("GET POST", "/v2/trace/setting", trace)
    app.add("GET POST", "/v2/models/{model}/trace/setting", trace)
    app.add("GET POST", "/v2/logging", logging_settings)


def _add_shared_memory_routes(app: Router, dataplane: DataPlaneApi) -> None:
    """Triton's system and CUDA shared memory extensions."""

    def region(request: ControlRequest) -> tuple[str, ...]:
        return tuple(request.params.values())  # (), or the region's name

    async def system_status(request: ControlRequest) -> Answer:
        return _json(dataplane.shm_status(*region(request)))

    async def system_register(request: ControlRequest) -> Answer:
        body = _json_body(request)
        for field in ("key", "byte_size"):
            if field not in body:
                raise ServeError.invalid(f"Shared memory register request has no '{field}' field")
        name = request.params["region"]
        dataplane.shm_register(name, body["key"], body.get("offset", 0), body["byte_size"])
        return _OK

    async def system_unregister(request: ControlRequest) -> Answer:
        dataplane.shm_unregister(*region(request))
        return _OK

    async def cuda_status(request: ControlRequest) -> Answer:
        return _json(dataplane.cuda_shm_status(*region(request)))

    async def cuda_register(request: ControlRequest) -> Answer:
        body = _json_body(request)
        for field in ("raw_handle", "device_id", "byte_size"):
            if field not in body:
                raise ServeError.invalid(
                    f"CUDA shared memory register request has no '{field}' field"
                )
        name = request.params["region"]
        dataplane.cuda_shm_register(name, body["raw_handle"], body["device_id"], body["byte_size"])
        return _OK

    async def cuda_unregister(request: ControlRequest) -> Answer:
        dataplane.cuda_shm_unregister(*region(request))
        return _OK

    for root, status, register, unregister in (
        ("/v2/systemsharedmemory", system_status, system_register, system_unregister),
        ("/v2/cudasharedmemory", cuda_status, cuda_register, cuda_unregister),
    ):
        app.add("GET POST", f"{root}/status", status)
        app.add("GET POST", f"{root}/region/{{region}}/status", status)
        app.add("POST", f"{root}/region/{{region}}/register", register)
        app.add("POST", f"{root}/unregister", unregister)
        app.add("POST", f"{root}/region/{{region}}/unregister", unregister)


def build_http_app(dataplane: DataPlaneApi) -> InferRoute:
    """The ASGI application served by uvicorn."""
    return InferRoute(dataplane, build_control_plane(dataplane))

"""KServe v2 REST with Triton's extensions: FastAPI carries the control plane, and the infer
route is a plain ASGI handler in front of it (see `serve.http.infer_route`)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

import serve
from serve.dataplane import DataPlane
from serve.errors import ServeError
from serve.http.codec import encode_error
from serve.http.infer_route import InferRoute
from serve.http.settings_codec import log_update, trace_response, trace_update
from serve.http.status import HTTP_STATUS


def _json(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return Response(encode_error(message), status_code=status, media_type="application/json")


def _flag(ok: bool) -> Response:
    # Triton answers readiness and liveness with an empty 200, or 400 when not ready.
    return Response(status_code=200 if ok else 400)


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ServeError.invalid(f"malformed JSON in the request body: {exc}") from None
    if not isinstance(body, dict):
        raise ServeError.invalid("the request body must be a JSON object")
    return body


def build_control_plane(dataplane: DataPlane) -> FastAPI:
    app = FastAPI(
        title="autotune",
        version=serve.__version__,
        description="KServe v2 inference protocol with Triton's extensions",
        docs_url=None,
        redoc_url=None,
    )

    @app.exception_handler(ServeError)
    async def _serve_error(_: Request, exc: ServeError) -> Response:
        return _error(HTTP_STATUS[exc.kind], exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
        return _error(400, str(exc))

    @app.get("/v2")
    async def server_metadata() -> Response:
        return _json(dataplane.server_metadata())

    @app.get("/v2/health/live")
    async def live() -> Response:
        return _flag(dataplane.live())

    @app.get("/v2/health/ready")
    async def ready() -> Response:
        return _flag(dataplane.ready())

    @app.get("/v2/models/stats")
    async def all_stats() -> Response:
        return _json(dataplane.statistics())

    @app.get("/v2/models/{model}")
    async def model_metadata(model: str) -> Response:
        return _json(dataplane.model_metadata(model))

    @app.get("/v2/models/{model}/versions/{version}")
    async def version_metadata(model: str, version: str) -> Response:
        return _json(dataplane.model_metadata(model, version))

    @app.get("/v2/models/{model}/ready")
    async def model_ready(model: str) -> Response:
        return _flag(dataplane.model_ready(model))

    @app.get("/v2/models/{model}/versions/{version}/ready")
    async def version_ready(model: str, version: str) -> Response:
        return _flag(dataplane.model_ready(model, version))

    @app.get("/v2/models/{model}/config")
    async def model_config(model: str) -> Response:
        return _json(dataplane.model_config(model))

    @app.get("/v2/models/{model}/versions/{version}/config")
    async def version_config(model: str, version: str) -> Response:
        return _json(dataplane.model_config(model, version))

    @app.get("/v2/models/{model}/stats")
    async def model_stats(model: str) -> Response:
        return _json(dataplane.statistics(model))

    @app.get("/v2/models/{model}/versions/{version}/stats")
    async def version_stats(model: str, version: str) -> Response:
        return _json(dataplane.statistics(model, version))

    @app.post("/v2/repository/index")
    async def repository_index(request: Request) -> Response:
        body = await _json_body(request)
        return _json(dataplane.repository_index(bool(body.get("ready", False))))

    @app.post("/v2/repository/models/{model}/load")
    async def load(model: str, request: Request) -> Response:
        body = await _json_body(request)
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ServeError.invalid("load 'parameters' must be a JSON object")
        await dataplane.load_model(model, parameters)
        return Response(status_code=200)

    @app.post("/v2/repository/models/{model}/unload")
    async def unload(model: str, request: Request) -> Response:
        parameters = (await _json_body(request)).get("parameters") or {}
        dependents = isinstance(parameters, dict) and parameters.get("unload_dependents") is True
        await dataplane.unload_model(model, unload_dependents=dependents)
        return Response(status_code=200)

    _add_shared_memory_routes(app, dataplane)
    _add_settings_routes(app, dataplane)
    return app


def _add_settings_routes(app: FastAPI, dataplane: DataPlane) -> None:
    """Triton's trace and logging extensions: GET reads, POST changes and answers the
    settings now in force."""

    async def trace(model: str, request: Request) -> Response:
        update = trace_update(await _json_body(request)) if request.method == "POST" else {}
        return _json(trace_response(dataplane.trace_setting(model, update)))

    @app.api_route("/v2/trace/setting", methods=["GET", "POST"])
    async def global_trace(request: Request) -> Response:
        return await trace("", request)

    @app.api_route("/v2/models/{model}/trace/setting", methods=["GET", "POST"])
    async def model_trace(model: str, request: Request) -> Response:
        return await trace(model, request)

    @app.api_route("/v2/logging", methods=["GET", "POST"])
    async def logging_settings(request: Request) -> Response:
        update = log_update(await _json_body(request)) if request.method == "POST" else {}
        return _json(dataplane.log_settings(update))


def _add_shared_memory_routes(app: FastAPI, dataplane: DataPlane) -> None:
    """Triton's system and CUDA shared memory extensions (CUDA: none can be registered)."""
    system = "/v2/systemsharedmemory"
    cuda = "/v2/cudasharedmemory"

    @app.api_route(f"{system}/status", methods=["GET", "POST"])
    async def shm_status_all() -> Response:
        return _json(dataplane.shm_status())

    @app.api_route(f"{system}/region/{{region}}/status", methods=["GET", "POST"])
    async def shm_status(region: str) -> Response:
        return _json(dataplane.shm_status(region))

    @app.post(f"{system}/region/{{region}}/register")
    async def shm_register(region: str, request: Request) -> Response:
        body = await _json_body(request)
        for field in ("key", "byte_size"):
            if field not in body:
                raise ServeError.invalid(f"Shared memory register request has no '{field}' field")
        dataplane.shm_register(region, body["key"], body.get("offset", 0), body["byte_size"])
        return Response(status_code=200)

    @app.post(f"{system}/unregister")
    async def shm_unregister_all() -> Response:
        dataplane.shm_unregister()
        return Response(status_code=200)

    @app.post(f"{system}/region/{{region}}/unregister")
    async def shm_unregister(region: str) -> Response:
        dataplane.shm_unregister(region)
        return Response(status_code=200)

    @app.api_route(f"{cuda}/status", methods=["GET", "POST"])
    async def cuda_status_all() -> Response:
        return _json(dataplane.cuda_shm_status())

    @app.api_route(f"{cuda}/region/{{region}}/status", methods=["GET", "POST"])
    async def cuda_status(region: str) -> Response:
        return _json(dataplane.cuda_shm_status(region))

    @app.post(f"{cuda}/region/{{region}}/register")
    async def cuda_register(region: str) -> Response:
        dataplane.cuda_shm_register(region)
        return Response(status_code=200)

    @app.post(f"{cuda}/unregister")
    async def cuda_unregister_all() -> Response:
        dataplane.cuda_shm_unregister()
        return Response(status_code=200)

    @app.post(f"{cuda}/region/{{region}}/unregister")
    async def cuda_unregister(region: str) -> Response:
        dataplane.cuda_shm_unregister(region)
        return Response(status_code=200)


def build_http_app(dataplane: DataPlane) -> InferRoute:
    """The ASGI application served by uvicorn."""
    return InferRoute(dataplane, build_control_plane(dataplane))

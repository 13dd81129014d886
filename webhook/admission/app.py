"""The HTTP transport: the admission calls straight to the framework-free Handler, the rest as Flask routes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from flask import Flask, Response, request  # noqa: TID251  (the one module that may)

from webhook.admission import metrics, review
from webhook.admission.handler import Handler


def _json(status: int, document: object) -> Response:
    return Response(json.dumps(document, separators=(",", ":")), status=status, mimetype="application/json")


def _drain(length: int, limit: int = 32 * 1024 * 1024) -> None:
    """Read and drop an oversized body so the client sees the 413, not a reset connection."""
    remaining = min(length, limit)
    while remaining > 0:
        chunk = request.stream.read(min(remaining, 1 << 16))
        if not chunk:
            break
        remaining -= len(chunk)


ADMISSION_PATHS = {"/mutate": "mutate", "/validate": "validate"}


class AdmissionFirst:
    """The WSGI app: a POST to /mutate or /validate goes straight to the Handler; anything else (health,
    metrics, the benchmark's no-op, a wrong method or path) to the Flask routes.

    Flask's request and response machinery (request context, URL map binding, a Response object) cost
    about 200 us of CPU per call here, as much as the whole admission decision of a Job's pod (cProfile
    of the WSGI call, bench/admission.py's review), and an admission call uses none of it. The answers
    are the same: the same checks on the body, the same JSON.
    """

    def __init__(self, handler: Handler, routes: Flask) -> None:
        self.handler, self.routes = handler, routes

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        endpoint = ADMISSION_PATHS.get(environ.get("PATH_INFO", ""))
        if endpoint is None or environ.get("REQUEST_METHOD") != "POST":
            return self.routes(environ, start_response)
        status, document = self._answer(endpoint, environ)
        start_response(f"{status} {HTTPStatus(status).phrase}", [("Content-Type", "application/json")])
        return [json.dumps(document, separators=(",", ":")).encode()]

    def _answer(self, endpoint: str, environ: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length > review.MAX_BODY_BYTES:
            return 413, _too_large(length)
        refusal = _content_type_refusal(environ.get("CONTENT_TYPE", ""))
        if refusal is not None:
            return 400, refusal
        return self.handler.handle(endpoint, environ["wsgi.input"].read(review.MAX_BODY_BYTES + 1))


def _too_large(length: int) -> dict[str, Any]:
    return {"error": f"request body of {length} bytes exceeds the {review.MAX_BODY_BYTES} byte limit", "code": 413}


def _content_type_refusal(header: str) -> dict[str, Any] | None:
    """None for JSON or no type at all (the API server always sends application/json)."""
    content_type = header.partition(";")[0].strip().lower()
    if content_type and content_type != "application/json":
        return {"error": f"content type {content_type!r} is not application/json", "code": 400}
    return None


def create_app(
    handler: Handler, ready: Callable[[], bool] = lambda: True, noop_endpoint: bool = False
) -> AdmissionFirst:
    """The routes. Connection handling (keep-alive, `Connection: close` while draining) is the server's."""
    app = Flask("gangkeeper")

    def read_body() -> bytes | Response:
        length = request.content_length
        if length is not None and length > review.MAX_BODY_BYTES:
            _drain(length)
            return _json(413, _too_large(length))
        refusal = _content_type_refusal(request.content_type or "")
        if refusal is not None:
            return _json(400, refusal)
        return request.stream.read(review.MAX_BODY_BYTES + 1)

    # answered by AdmissionFirst; the rules stay so that another method gets Flask's 405, not a 404
    def unreachable() -> Response:
        return _json(500, {"error": "unreachable", "code": 500})

    app.add_url_rule("/mutate", "mutate", unreachable, methods=["POST"])
    app.add_url_rule("/validate", "validate", unreachable, methods=["POST"])
    if noop_endpoint:
        # the benchmark's baseline: what a no-op Flask webhook costs under this server

        def noop() -> Response:
            body = read_body()
            return body if isinstance(body, Response) else _json(*handler.noop(body))

        app.add_url_rule("/noop", "noop", noop, methods=["POST"])

    @app.get("/healthz")
    def healthz() -> Response:
        return _json(200, {"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        return _json(200, {"status": "ready"}) if ready() else _json(503, {"status": "not ready"})

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(metrics.render(), mimetype="text/plain; version=0.0.4")

    @app.errorhandler(404)
    def not_found(_: Exception) -> Response:
        return _json(404, {"error": f"no such endpoint {request.path}", "code": 404})

    @app.errorhandler(405)
    def wrong_method(_: Exception) -> Response:
        return _json(405, {"error": f"{request.method} is not allowed on {request.path}", "code": 405})

    return AdmissionFirst(handler, app)

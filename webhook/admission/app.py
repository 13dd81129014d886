"""The HTTP transport: Flask routes over the framework-free Handler."""

from __future__ import annotations

import json
from collections.abc import Callable

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


def create_app(handler: Handler, ready: Callable[[], bool] = lambda: True, noop_endpoint: bool = False) -> Flask:
    """The routes. Connection handling (keep-alive, `Connection: close` while draining) is the server's."""
    app = Flask("gangkeeper")

    def read_body() -> bytes | Response:
        length = request.content_length
        if length is not None and length > review.MAX_BODY_BYTES:
            _drain(length)
            return _json(
                413,
                {
                    "error": f"request body of {length} bytes exceeds the {review.MAX_BODY_BYTES} byte limit",
                    "code": 413,
                },
            )
        content_type = (request.mimetype or "").lower()
        if content_type and content_type != "application/json":
            return _json(400, {"error": f"content type {content_type!r} is not application/json", "code": 400})
        return request.stream.read(review.MAX_BODY_BYTES + 1)

    def admission(endpoint: str) -> Response:
        body = read_body()
        if isinstance(body, Response):
            return body
        return _json(*handler.handle(endpoint, body))

    app.add_url_rule("/mutate", "mutate", lambda: admission("mutate"), methods=["POST"])
    app.add_url_rule("/validate", "validate", lambda: admission("validate"), methods=["POST"])
    if noop_endpoint:

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

    return app

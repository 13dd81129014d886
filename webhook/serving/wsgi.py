"""Call a WSGI application (the Flask app) for one parsed request (PEP 3333)."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass
class Request:
    method: str
    target: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    keep_alive: bool = True
    reserved: int = 0  # bytes of the worker's in-flight budget this request holds


@dataclass(frozen=True)
class Reply:
    status: str  # "200 OK"
    headers: list[tuple[str, str]]
    body: bytes


def environ_for(request: Request, server: tuple[str, int], peer: tuple[str, int] | None) -> dict[str, Any]:
    path, _, query = request.target.partition(b"?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path.decode("latin-1"),
        "QUERY_STRING": query.decode("latin-1"),
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": peer[0] if peer else "",
        "CONTENT_LENGTH": str(len(request.body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "https",
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for raw_name, raw_value in request.headers:
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        if name in ("CONTENT_LENGTH", "TRANSFER_ENCODING"):
            continue  # the body is whole by now: its length is what was read
        value = raw_value.decode("latin-1")
        key = name if name == "CONTENT_TYPE" else f"HTTP_{name}"
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def call(app: WsgiApp, environ: dict[str, Any]) -> Reply:
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        started[:] = [status, headers]
        return lambda _: None  # the legacy write() callable; Flask never uses it

    result = app(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return Reply(started[0], started[1], body)

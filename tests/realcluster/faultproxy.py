"""A TLS proxy in front of the real kube-apiserver that answers chosen requests with a fault.

It listens on the API server's advertise address with the API server's own serving certificate (its
SANs name that address), so a pod's in-cluster client, which trusts the cluster CA, cannot tell it from
the API server. Every request is forwarded unchanged, credentials included, over one upstream
connection per client connection; watch responses are streamed chunk by chunk as they arrive. A test
sets `rule`: for a request it may return a Fault, which is answered instead of forwarding:
- a status (500, or 429 with Retry-After as the API server's priority and fairness sends it), the
  request never reaching the API server;
- a hang: the request is held, unanswered, for `seconds`, then the connection is closed.
"""

from __future__ import annotations

import http.client
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.realcluster.controlplane import ControlPlane, free_port

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes


@dataclass(frozen=True)
class Fault:
    status: int = 0  # 0: hang
    seconds: float = 0.0  # a hang's length

    @property
    def name(self) -> str:
        return f"hang {self.seconds:.0f}s" if not self.status else str(self.status)


Rule = Callable[[Request], Fault | None]


class FaultProxy:
    def __init__(self, plane: ControlPlane) -> None:  # noqa: C901  (over 15: to be split, issue 77)
        self.plane = plane
        self.address = (plane.advertise_address, free_port())
        self.rule: Rule = lambda request: None
        self.faults: list[tuple[Request, Fault]] = []  # what was answered with a fault, in order
        self.forwarded = 0
        self._lock = threading.Lock()
        upstream = ssl.create_default_context(cafile=str(plane.pki.ca))
        serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        serving.load_cert_chain(str(plane.pki.cert("apiserver")), str(plane.pki.key("apiserver")))
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            upstream_connection: http.client.HTTPSConnection | None = None

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def handle_one_request(self) -> None:
                try:
                    super().handle_one_request()
                except (ConnectionError, TimeoutError, ssl.SSLError):
                    self.close_connection = True

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(self.command, self.path, self.rfile.read(length) if length else b"")
                fault = proxy.rule(request)
                if fault is not None:
                    with proxy._lock:
                        proxy.faults.append((request, fault))
                    self._answer_with(fault)
                    return
                with proxy._lock:
                    proxy.forwarded += 1
                self._forward(request)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

            def _answer_with(self, fault: Fault) -> None:
                if not fault.status:
                    time.sleep(fault.seconds)
                    self.close_connection = True
                    return
                body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected by the test proxy"}'
                self.send_response(fault.status)
                if fault.status == 429:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self, request: Request) -> None:
                if self.upstream_connection is None:
                    self.upstream_connection = http.client.HTTPSConnection(
                        proxy.plane.advertise_address, proxy.plane.api_port, context=upstream, timeout=3600
                    )
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                self.upstream_connection.request(request.method, request.path, request.body or None, headers)
                response = self.upstream_connection.getresponse()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                if response.chunked:  # a watch: each chunk passed on as it arrives
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while chunk := response.read1(65536):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    body = response.read()
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                self.wfile.flush()

            def finish(self) -> None:
                if self.upstream_connection is not None:
                    self.upstream_connection.close()
                super().finish()

        class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

            def get_request(self) -> tuple[socket.socket, Any]:
                connection, peer = self.socket.accept()
                return serving.wrap_socket(connection, server_side=True, do_handshake_on_connect=False), peer

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that went away mid-answer: nothing to report

        self._server = Server(self.address, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="fault-proxy")

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def faulted(self, status: int | None = None) -> list[Request]:
        with self._lock:
            return [r for r, f in self.faults if status is None or f.status == status]

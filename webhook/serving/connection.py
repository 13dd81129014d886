"""One client connection: HTTP/1.1 parsed by httptools (llhttp), a deadline on every stage.

States and the deadline each one carries (checked by the worker's sweeper once a second):
- idle, between requests on a kept-alive connection: `idle_seconds`;
- head, from a request's first byte to the end of its headers: `header_seconds`, however slowly the
  bytes trickle in;
- body, from the end of the headers to the end of the body: `body_seconds`;
- busy, while the app answers: no deadline (the app never waits on the network).
A client that misses a deadline loses its connection; it never holds the loop or a thread.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any, NoReturn

import httptools

from webhook.serving.wsgi import Reply, Request

if TYPE_CHECKING:
    from webhook.serving.worker import Worker

IDLE, HEAD, BODY, BUSY, WAITING = "idle", "head", "body", "busy", "waiting"
_REASONS = {
    200: "OK",
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
}
# what one header costs held as Python objects beside its text: a 2-tuple (56 bytes) and two bytes
# objects (33 bytes each before their text), rounded up
HEADER_OBJECT_BYTES = 128


def error_reply(code: int, message: str, retry_after: int | None = None) -> Reply:
    headers = [("Content-Type", "application/json")]
    if retry_after is not None:
        # client-go's REST client (which the API server's webhook client is) retries a 429 that
        # carries Retry-After, within the webhook's timeout: rest/request.go, checkWait.
        headers.append(("Retry-After", str(retry_after)))
    body = json.dumps({"error": message, "code": code}, separators=(",", ":")).encode()
    return Reply(f"{code} {_REASONS.get(code, '')}".rstrip(), headers, body)


def encode(reply: Reply, keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {reply.status}"]
    # the length is the body's as sent (the app's own Content-Length would be a second, duplicate header)
    lines.extend(
        f"{name}: {value}" for name, value in reply.headers if name.lower() not in ("connection", "content-length")
    )
    lines.append(f"Content-Length: {len(reply.body)}")
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + reply.body


class HttpConnection(asyncio.BufferedProtocol):
    """A buffered protocol: uvloop's TLS transport decrypts straight into the worker's read buffer
    (uvloop/sslproto.pyx, SSLProtocol._do_read__buffered). With a plain protocol it read each record into
    a new 256 KiB bytes object, mapped and unmapped per read under our malloc threshold, and read once
    more for the SSLWantReadError that ends every read (CPython's costly exception, python/cpython#123954);
    the buffered path stops once nothing is pending."""

    def __init__(self, worker: Worker, handshake: object = None) -> None:
        self.worker, self.limits = worker, worker.limits
        self.handshake = handshake  # the worker's token for this connection's TLS handshake under way
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self.state, self.deadline = IDLE, time.monotonic() + self.limits.idle_seconds
        self.request: Request | None = None
        self._url: list[bytes] = []
        # the body as it arrives, in one buffer: pieces of at most a TLS record (16 KiB) kept apart sat in
        # the heap, under the 64 KiB mapping threshold (cli/serve.py), and stayed resident after a
        # refused chunked body (two workers under the chunked attack: 338-373 MiB against 287)
        self._body = bytearray()
        self._header_bytes = self._body_bytes = 0
        self.queue: list[Request] = []  # complete requests waiting their turn (a pipelining client)
        self.closing = False
        self.opened, self.served = time.monotonic(), 0

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.worker.accept(self):
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        for request in [self.request, *self.queue]:  # a large one on the side thread releases when done
            if request is not None:
                self._release(request)
        self.queue.clear()
        self.worker.forget(self)
        # The parser holds this protocol for its callbacks and the transport holds it too: both links
        # are cut so reference counting frees the connection at once. Left as cycles, each closed
        # connection waited for a full collection, which the tuned thresholds make rare (25 KB each).
        self.parser, self.transport = None, None

    def get_buffer(self, sizehint: int) -> memoryview:
        # one buffer per worker, shared: the transport fills it and calls buffer_updated at once, on the
        # loop's one thread, and the parser copies out what it keeps before the next read
        return self.worker.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.worker.read_buffer[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        if self.closing:
            return
        try:
            assert self.parser is not None  # set until the connection is lost
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.fail(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as error:
            if not self.closing:
                self.fail(400, f"malformed HTTP request: {error}")
        self._next()

    # httptools callbacks

    def on_message_begin(self) -> None:
        self.state, self.deadline = HEAD, time.monotonic() + self.limits.header_seconds
        self.request = Request(method="", target=b"")
        self._url, self._body, self._header_bytes, self._body_bytes = [], bytearray(), 0, 0

    def on_url(self, url: bytes) -> None:
        self._url.append(url)
        self._count_header(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.request
        assert request is not None
        if len(request.headers) >= self.limits.max_headers:
            self._refuse_head(431, f"more than {self.limits.max_headers} request headers")
        request.headers.append((name, value))
        self._count_header(HEADER_OBJECT_BYTES + len(name) + len(value))

    def _count_header(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self.limits.max_header_bytes:
            self._refuse_head(400, f"request headers exceed {self.limits.max_header_bytes} bytes")

    def _refuse_head(self, code: int, message: str) -> NoReturn:
        """Refused while its headers come: what they held is let go at once, not when the peer leaves."""
        if self.request is not None:
            self.request.headers.clear()
        self._url = []
        self.fail(code, message)
        raise httptools.HttpParserError(message)

    def on_headers_complete(self) -> None:
        request = self.request
        assert request is not None
        assert self.parser is not None
        request.method = self.parser.get_method().decode("latin-1")
        request.target = b"".join(self._url)
        request.keep_alive = self.parser.should_keep_alive()
        length = next((int(v) for n, v in request.headers if n.lower() == b"content-length" and v.isdigit()), 0)
        if length > self.limits.max_body_bytes:
            self.fail(413, f"request body of {length} bytes exceeds the {self.limits.max_body_bytes} byte limit")
            raise httptools.HttpParserError("body too large")
        refusal = self.worker.reserve(max(length, 1))
        if refusal:
            self.fail(429, refusal, retry_after=1)
            raise httptools.HttpParserError("overloaded")
        request.reserved = max(length, 1)
        self.state, self.deadline = BODY, time.monotonic() + self.limits.body_seconds
        if any(n.lower() == b"expect" and v.lower() == b"100-continue" for n, v in request.headers):
            self._write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, chunk: bytes) -> None:
        self._body_bytes += len(chunk)
        if self._body_bytes > self.limits.max_body_bytes:  # chunked bodies announce no length
            self.fail(413, f"request body exceeds the {self.limits.max_body_bytes} byte limit")
            raise httptools.HttpParserError("body too large")
        request = self.request
        assert request is not None
        if self._body_bytes > request.reserved:
            # a chunked body announced no length: it takes from the in-flight budget as it arrives
            refusal = self.worker.reserve_more(self._body_bytes - request.reserved)
            if refusal:
                self.fail(429, refusal, retry_after=1)
                raise httptools.HttpParserError("overloaded")
            request.reserved = self._body_bytes
        self._body += chunk

    def on_message_complete(self) -> None:
        request = self.request
        assert request is not None
        request.body = bytes(self._body)
        self._body, self.request = bytearray(), None
        self.queue.append(request)
        self.state, self.deadline = BUSY, float("inf")

    # answering

    def _next(self) -> None:
        """Answer queued requests in order; a large one goes to the side thread and resumes us after."""
        while self.queue and not self.closing and self.state != WAITING:
            request = self.queue.pop(0)
            large = len(request.body) >= self.limits.large_body_bytes
            reply = None if large else self.worker.run_on_loop(request, self.peer())
            if reply is None:  # a large body, or an answer that waits on the API server: off the loop
                self.state = WAITING
                assert self.transport is not None
                self.transport.pause_reading()
                run = self.worker.run_large if large else self.worker.run_waiting
                future = run(request, self.peer())
                future.add_done_callback(lambda done, r=request: self._large_done(r, done))  # type: ignore[misc]
                return
            self.respond(request, reply)

    def _large_done(self, request: Request, done: asyncio.Future[Reply]) -> None:
        if self.closing:
            self._release(request)
            return
        self.state = BUSY
        reply = done.result() if not done.cancelled() and done.exception() is None else error_reply(500, "internal")
        self.respond(request, reply)
        if self.transport is not None and not self.closing:
            self.transport.resume_reading()
        self._next()

    def respond(self, request: Request, reply: Reply) -> None:
        keep_alive = request.keep_alive and not self.worker.draining and not self.closing
        self._write(encode(reply, keep_alive))
        self.served += 1
        self._release(request)
        if not keep_alive:
            self.close()
        elif not self.queue:
            self.state, self.deadline = IDLE, time.monotonic() + self.limits.idle_seconds

    def fail(self, code: int, message: str, retry_after: int | None = None) -> None:
        """Answer an unusable request and close: what follows on this connection cannot be trusted."""
        if self.closing:
            return
        self.worker.count_refusal(code)
        self._write(encode(error_reply(code, message, retry_after), keep_alive=False))
        self.close()

    def _release(self, request: Request) -> None:
        if request.reserved:
            self.worker.release(request.reserved)
            request.reserved = 0

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def peer(self) -> Any:
        return self.transport.get_extra_info("peername") if self.transport is not None else None

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()  # flushes what was written first

    def expire(self, now: float) -> bool:
        """Called by the sweeper: close a connection whose current stage ran out of time."""
        if now < self.deadline:
            return False
        if self.state in (HEAD, BODY):
            self.fail(408, f"request {'headers' if self.state == HEAD else 'body'} not received in time")
        elif self.transport is not None:
            self.closing = True
            self.transport.abort() if self.transport.get_write_buffer_size() else self.transport.close()
        return True

    def idle(self) -> bool:
        return self.state == IDLE and not self.queue

    def closable_at_shutdown(self, now: float, grace: float) -> bool:
        """Idle, and not a connection just opened whose first request is surely on its way: a client
        finds an idle connection closed only when it writes (Go's transport notices at once; others
        do not), so a new one gets `grace` seconds to send and be answered with `Connection: close`."""
        return self.idle() and (self.served > 0 or now - self.opened > grace)

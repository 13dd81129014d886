"""The worker's one read buffer, shared by its connections: the TLS transport decrypts into it and hands
it over at once (HttpConnection.get_buffer, buffer_updated), so requests that arrive in pieces, their
reads interleaved across connections, each come out whole and unmixed."""

from __future__ import annotations

from typing import Any

from tests.unit.test_connection_memory import FakeTransport, FakeWorker
from webhook.serving.connection import HttpConnection
from webhook.serving.wsgi import Reply


class EchoWorker(FakeWorker):
    def __init__(self, buffer_bytes: int) -> None:
        self.read_buffer = memoryview(bytearray(buffer_bytes))

    def run_on_loop(self, request: Any, peer: Any) -> Reply:
        return Reply("200 OK", [("Content-Type", "application/json")], request.body)


def deliver(connection: HttpConnection, data: bytes) -> None:
    """What uvloop's transport does with a buffered protocol: fill the buffer it is given, in as many
    reads as the data needs, and say how much each read put in."""
    while data:
        buffer = connection.get_buffer(len(data))
        size = min(len(buffer), len(data))
        buffer[:size] = data[:size]
        connection.buffer_updated(size)
        data = data[size:]


def request(body: bytes) -> bytes:
    return b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def test_requests_read_in_pieces_through_one_shared_buffer_come_out_whole_and_unmixed() -> None:
    worker = EchoWorker(buffer_bytes=1024)
    first, second = HttpConnection(worker), HttpConnection(worker)  # type: ignore[arg-type]
    first_transport, second_transport = FakeTransport(), FakeTransport()
    first.connection_made(first_transport)
    second.connection_made(second_transport)
    # bodies larger than the buffer: each arrives over several reads
    one, two = request(b"a" * 3000), request(b"b" * 2500)
    for start in range(0, max(len(one), len(two)), 700):  # reads interleaved, each cut mid-header or body
        deliver(first, one[start : start + 700])
        deliver(second, two[start : start + 700])
    assert first_transport.written.endswith(b"\r\n\r\n" + b"a" * 3000)
    assert second_transport.written.endswith(b"\r\n\r\n" + b"b" * 2500)
    assert b"Content-Length: 3000" in first_transport.written
    assert b"Content-Length: 2500" in second_transport.written


def test_a_chunked_body_read_in_pieces_comes_out_whole_from_its_one_growing_buffer() -> None:
    worker = EchoWorker(buffer_bytes=512)
    connection = HttpConnection(worker)  # type: ignore[arg-type]
    transport = FakeTransport()
    connection.connection_made(transport)
    pieces = [bytes([ord("a") + i % 26]) * (100 + 37 * i) for i in range(12)]
    head = b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    deliver(connection, head + chunked)
    assert transport.written.endswith(b"\r\n\r\n" + b"".join(pieces))

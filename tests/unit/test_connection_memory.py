"""A closed connection is freed by reference counting at once. The worker runs with collector
thresholds tuned for latency (a full collection is rare), so a connection left in a reference cycle
(the parser's callbacks and the transport both hold it) stayed until then: about 25 KB per TLS
connection, 937 MiB in one worker after 65k connections."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

from webhook.serving.connection import HttpConnection
from webhook.serving.limits import Limits
from webhook.serving.wsgi import Reply


class FakeWorker:
    limits, draining = Limits(), False

    def accept(self, connection: HttpConnection) -> bool:
        return True

    def forget(self, connection: HttpConnection) -> None:
        pass

    def reserve(self, size: int) -> str | None:
        return None

    def reserve_more(self, size: int) -> str | None:
        return None

    def release(self, size: int) -> None:
        pass

    def count_refusal(self, code: int) -> None:
        pass

    def run_on_loop(self, request: Any, peer: Any) -> Reply:
        return Reply("200 OK", [("Content-Type", "application/json")], b"{}")


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed, self.written = False, b""

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def get_write_buffer_size(self) -> int:
        return 0


def test_a_closed_connection_is_freed_without_the_collector() -> None:
    gc.disable()
    try:
        connection = HttpConnection(FakeWorker())  # type: ignore[arg-type]
        transport = FakeTransport()
        connection.connection_made(transport)
        connection.data_received(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert transport.written.startswith(b"HTTP/1.1 200 OK")
        connection.connection_lost(None)
        freed = weakref.ref(connection)
        del connection, transport
        assert freed() is None
    finally:
        gc.enable()

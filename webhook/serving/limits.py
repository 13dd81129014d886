"""The deadlines and ceilings one worker process enforces; every number is a flag of `gangkeeper serve`."""

from __future__ import annotations

from dataclasses import dataclass

from webhook.admission.review import MAX_BODY_BYTES


@dataclass(frozen=True)
class Limits:
    handshake_seconds: float = 5.0  # TCP accept to TLS established
    header_seconds: float = 5.0  # first byte of a request to the end of its headers
    body_seconds: float = 10.0  # end of headers to the end of the body
    # Longer than the API server keeps idle connections (client-go's transport: 90 s), so the server
    # never closes one the client is about to reuse: a POST on a closed connection is not retried.
    idle_seconds: float = 120.0
    max_header_bytes: int = 64 * 1024
    max_body_bytes: int = MAX_BODY_BYTES
    max_connections: int = 4096  # per process; beyond it the idlest is closed (or, none idle, the new one)
    max_in_flight: int = 512  # requests read and not yet answered, per process
    # Bodies of requests in flight, per process: bounds what large reviews can hold at once.
    max_in_flight_bytes: int = 24 * 1024 * 1024
    # Reviews at least this large run on the side thread, so they never stall the loop's other clients.
    large_body_bytes: int = 128 * 1024

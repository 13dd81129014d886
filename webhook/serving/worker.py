"""One worker process: a listening socket of its own (SO_REUSEPORT), one asyncio loop, one side thread.

The kernel spreads new connections evenly over the workers' sockets, unlike one shared accept queue
where whichever process wakes first takes the burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from webhook.kube import WouldWait, no_waiting
from webhook.serving import wsgi
from webhook.serving.connection import HttpConnection, error_reply
from webhook.serving.limits import Limits
from webhook.serving.tls import CertificateReloader
from webhook.serving.wsgi import Reply, Request, WsgiApp

log = logging.getLogger("gangkeeper.serve")

ACCEPT_BATCH = 128  # connections taken from the queue per wake-up, so handshakes under way progress too
# TLS handshakes worked on at once per process, each once its client's ClientHello is in. A handshake
# costs about 1.5 ms of CPU here (OpenSSL's key exchange and signature, the TLS layer's bookkeeping), ten
# times a request. Started all at once, a burst of new connections held the loop from the requests of
# the connections already open; those answered late, the API server (Go's transport: a new connection
# for every call beyond its idle ones) dialed more, and the webhook collapsed into handshakes:
# bench/admission.py's open loop at 1,500/s, half the closed-loop peak, answered 635/s with p99 6 s. A
# few at a time, the open connections keep being answered between them and Go hands a waiting call the
# first one freed.
CONCURRENT_HANDSHAKES = 2
# A handshake holds its turn this long at most, then goes on without one: a client that stalls its
# handshake (a partial ClientHello, no Finished) cannot keep others waiting for its deadline. The server's
# part of a handshake is done in its first millisecond or two; the rest of a turn waits for the client.
# At 50 ms, 256 connections dialed at once by a client busy with its own handshakes waited up to 1.3 s
# for their turns (bench/admission.py's 256-connection level; 0.3-0.7 s at 10 ms).
TURN_SECONDS = 0.01


# the connections' read buffer, one per worker (connection.py, HttpConnection.get_buffer): a TLS record
# is at most 16 KiB, and a bigger body arrives over several reads
READ_BUFFER_BYTES = 64 * 1024

# reviews answered side by side off the loop while they wait on the API server (each at most its read's
# deadline, admission/workloads.py READ_SECONDS); more wait their turn in the executor's queue
WAITING_THREADS = 8


def backlog() -> int:
    """The kernel's ceiling on accept queues: the API server dials a new connection for every call
    beyond its 25 idle ones, so bursts of dials must wait in the queue rather than lose their SYN (a
    dropped SYN is retried only after a second)."""
    try:
        return int(open("/proc/sys/net/core/somaxconn").read())
    except (OSError, ValueError):
        return socket.SOMAXCONN


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


class Worker:
    def __init__(
        self,
        app: WsgiApp,
        limits: Limits,
        reloader: CertificateReloader,
        host: str,
        port: int,
        drain_seconds: float = 0.0,
        graceful_seconds: float = 20.0,
        on_refusal: Callable[[int], None] = lambda code: None,
        on_count: Callable[[int, int, int], None] = lambda open_, handshaking, waiting: None,
    ) -> None:
        self.app, self.limits, self.reloader = app, limits, reloader
        self.host, self.port = host, port
        self.drain_seconds, self.graceful_seconds = drain_seconds, graceful_seconds
        self.on_refusal, self.on_count = on_refusal, on_count
        self.connections: set[HttpConnection] = set()
        # handshakes started and not finished, by a token the connection carries: the count ends when
        # the connection is made, not when connect_accepted_socket returns (under uvloop
        # that awaitable resolves only once the connection closes, so an established connection was
        # counted twice and a closing one made room for a silent handshake)
        self.handshakes: set[object] = set()
        self._handshake_tasks: set[asyncio.Task[None]] = set()
        # accepted sockets that hold no TLS state yet, each with its handshake deadline: those whose
        # ClientHello has not come, and those whose ClientHello came, waiting their turn
        self._silent: dict[socket.socket, float] = {}
        self._hello_queue: deque[tuple[socket.socket, float]] = deque()
        self._turns: set[object] = set()  # the handshakes holding a turn
        self.in_flight = self.in_flight_bytes = 0
        self.read_buffer = memoryview(bytearray(READ_BUFFER_BYTES))
        self.draining = False
        self._large = ThreadPoolExecutor(1, thread_name_prefix="large-review")
        # reviews that wait on an API read (a gang pod's workload uid, a PodGroup made ahead): each holds
        # a thread for at most its read's deadline, never the loop that answers the others
        self._waiting = ThreadPoolExecutor(WAITING_THREADS, thread_name_prefix="waiting-review")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None

    # bookkeeping the connections call

    def accept(self, connection: HttpConnection) -> bool:
        self._handshake_over(connection.handshake)
        if len(self.connections) >= self.limits.max_connections:
            # room is made by closing the connection idle the longest: silent connections cannot
            # lock out the API server's next call; when none is idle, the new one is refused
            idle = [c for c in self.connections if c.idle()]
            if not idle:
                self.count_refusal(503)
                return False
            oldest = min(idle, key=lambda c: c.deadline)
            oldest.close()
            self.connections.discard(oldest)
        self.connections.add(connection)
        return True

    def room(self) -> bool:
        """Room for one more TLS connection, handshakes under way counted: each holds TLS state (about
        60 KiB) from its start on, so a burst of stalled handshakes is bounded by the same cap."""
        if len(self.connections) + len(self.handshakes) < self.limits.max_connections:
            return True
        idle = [c for c in self.connections if c.idle()]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.deadline)
        oldest.close()
        self.connections.discard(oldest)
        return True

    def forget(self, connection: HttpConnection) -> None:
        self.connections.discard(connection)

    def reserve(self, size: int) -> str | None:
        """Room for one more request of `size` body bytes, or why there is none."""
        if self.in_flight >= self.limits.max_in_flight:
            return f"overloaded: {self.in_flight} requests in flight in this process; retry"
        if self.in_flight and self.in_flight_bytes + size > self.limits.max_in_flight_bytes:
            return f"overloaded: {self.in_flight_bytes} bytes of requests in flight in this process; retry"
        self.in_flight += 1
        self.in_flight_bytes += size
        return None

    def reserve_more(self, size: int) -> str | None:
        """`size` more bytes for a request already counted (a chunked body, as it arrives)."""
        if self.in_flight > 1 and self.in_flight_bytes + size > self.limits.max_in_flight_bytes:
            return f"overloaded: {self.in_flight_bytes} bytes of requests in flight in this process; retry"
        self.in_flight_bytes += size
        return None

    def release(self, size: int) -> None:
        self.in_flight -= 1
        self.in_flight_bytes -= size

    def count_refusal(self, code: int) -> None:
        self.on_refusal(code)

    # running the app

    def run(self, request: Request, peer: tuple[str, int] | None) -> Reply:
        try:
            return wsgi.call(self.app, wsgi.environ_for(request, (self.host, self.port), peer))
        except WouldWait:
            raise  # run_on_loop's: answered again off the loop
        except Exception:  # the app answers its own errors; this is a bug below it: log, answer, go on
            log.exception("unhandled error serving a request", extra={"path": request.target.decode("latin-1")})
            return error_reply(500, "internal error; see the webhook logs")

    def run_on_loop(self, request: Request, peer: tuple[str, int] | None) -> Reply | None:
        """The reply, or None when answering needs an API read: then `run_waiting` answers it."""
        try:
            with no_waiting():
                return self.run(request, peer)
        except WouldWait:
            return None

    def run_large(self, request: Request, peer: tuple[str, int] | None) -> asyncio.Future[Reply]:
        assert self._loop is not None
        return self._loop.run_in_executor(self._large, self.run, request, peer)

    def run_waiting(self, request: Request, peer: tuple[str, int] | None) -> asyncio.Future[Reply]:
        assert self._loop is not None
        return self._loop.run_in_executor(self._waiting, self.run, request, peer)

    # lifecycle

    async def serve(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        # accepted here, not by loop.create_server: a connection over the cap is closed before any TLS
        # state exists for it, rather than after its handshake
        listener = listening_socket(self.host, self.port, backlog())
        loop.add_reader(listener, self._accept, listener)
        loop.add_signal_handler(signal.SIGTERM, self.begin_drain)
        loop.add_signal_handler(signal.SIGINT, self.begin_drain)
        sweeper = loop.create_task(self._sweep())
        await self._stopped.wait()
        loop.remove_reader(listener)
        listener.close()
        await self._finish()
        sweeper.cancel()
        self._large.shutdown(wait=False, cancel_futures=True)
        self._waiting.shutdown(wait=False, cancel_futures=True)

    def _accept(self, listener: socket.socket) -> None:
        assert self._loop is not None
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of descriptors and kin: the queue waits for a connection to close
                log.warning("accept failed", extra={"error": str(error)})
                return
            full = len(self._silent) + len(self._hello_queue) >= self.limits.max_waiting
            if full and not self._drop_oldest_waiting():
                self.count_refusal(503)
                sock.close()
                continue
            sock.setblocking(False)
            # no TLS state and no turn until the client speaks: a silent connection costs a socket only
            self._silent[sock] = time.monotonic() + self.limits.handshake_seconds
            self._loop.add_reader(sock, self._hello, sock)

    def _drop_oldest_waiting(self) -> bool:
        """Room for a new connection, if any waits (`--max-waiting-connections` may be 0): the silent one
        accepted longest ago is closed, else the one waiting longest for its turn. Go's transport (the API
        server's) dials for a call that finds no idle connection and keeps the dial going once an idle one
        served the call, so under a burst the queue fills with dials nobody waits for, oldest first;
        refusing the newest failed the calls that did wait for their own dial (bench/admission.py at 256
        connections: 1,729 refused in 2 s, 4 calls EOF)."""
        assert self._loop is not None
        if self._silent:
            sock = next(iter(self._silent))
            del self._silent[sock]
            self._loop.remove_reader(sock)
        elif self._hello_queue:
            sock = self._hello_queue.popleft()[0]
        else:
            return False
        self.count_refusal(503)
        sock.close()
        return True

    def _hello(self, sock: socket.socket) -> None:
        """The client's first bytes are in: its handshake waits for a turn."""
        assert self._loop is not None
        self._loop.remove_reader(sock)
        self._hello_queue.append((sock, self._silent.pop(sock)))
        self._start_handshakes()

    def _start_handshakes(self) -> None:
        assert self._loop is not None
        while self._hello_queue and len(self._turns) < CONCURRENT_HANDSHAKES:
            sock, deadline = self._hello_queue.popleft()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.room():  # waited past its deadline, or no room for TLS state
                self.count_refusal(503)
                sock.close()
                continue
            handshake = object()
            self.handshakes.add(handshake)
            self._turns.add(handshake)
            self._loop.call_later(TURN_SECONDS, self._end_turn, handshake)
            task = self._loop.create_task(self._handshake(sock, handshake, remaining))
            self._handshake_tasks.add(task)
            task.add_done_callback(self._handshake_tasks.discard)

    def _end_turn(self, handshake: object) -> None:
        if handshake in self._turns:
            self._turns.discard(handshake)
            self._start_handshakes()

    def _handshake_over(self, handshake: object) -> None:
        """Connected, failed or timed out: its TLS state is a connection's or gone, its turn the next's."""
        self.handshakes.discard(handshake)
        self._end_turn(handshake)

    async def _handshake(self, sock: socket.socket, handshake: object, seconds: float) -> None:
        assert self._loop is not None
        # a client that fails its handshake or never finishes it: the transport has closed its socket
        try:
            with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
                await self._loop.connect_accepted_socket(
                    lambda: HttpConnection(self, handshake),
                    sock,
                    ssl=self.reloader.listener_context(),
                    ssl_handshake_timeout=seconds,
                    # a closed connection waits this long for the client's close_notify, not asyncio's 30 s
                    ssl_shutdown_timeout=self.limits.handshake_seconds,
                )
        finally:
            self._handshake_over(handshake)  # failed or timed out: never made a connection

    def _expire_handshakes(self, now: float) -> None:
        """Sockets that sent nothing, or waited their turn, past the handshake deadline are closed."""
        assert self._loop is not None
        for sock, deadline in list(self._silent.items()):
            if now >= deadline:
                self._loop.remove_reader(sock)
                del self._silent[sock]
                sock.close()
        # in ClientHello order, nearly deadline order; one behind a later deadline is dropped at its turn
        while self._hello_queue and self._hello_queue[0][1] <= now:
            self._hello_queue.popleft()[0].close()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            self._expire_handshakes(now)
            for connection in list(self.connections):
                connection.expire(now)
            self.on_count(len(self.connections), len(self.handshakes), len(self._silent) + len(self._hello_queue))

    def begin_drain(self) -> None:
        """SIGTERM: unready and `Connection: close` on every answer for drain_seconds, then stop."""
        if self.draining:
            assert self._stopped is not None
            self._stopped.set()  # a second signal: stop now (still finishing what is in flight)
            return
        self.draining = True
        log.info("draining before shutdown", extra={"seconds": self.drain_seconds})
        assert self._loop is not None and self._stopped is not None
        self._loop.call_later(self.drain_seconds, self._stopped.set)

    async def _finish(self) -> None:
        """Stop accepting, close idle connections, let requests in flight finish (up to graceful_seconds)."""
        self.draining = True
        deadline = time.monotonic() + self.graceful_seconds
        # closed connections still wait for the client's TLS close_notify; they need nothing more from us
        # handshakes under way finish (bounded by their deadline) and get their answer with the rest
        while (
            self.handshakes or self._silent or self._hello_queue or any(not c.closing for c in self.connections)
        ) and time.monotonic() < deadline:
            now = time.monotonic()
            for connection in list(self.connections):
                if connection.closable_at_shutdown(now, grace=self.limits.header_seconds):
                    connection.close()
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            connection.close()
        await asyncio.sleep(0.2)  # the last answers leave the socket buffers before the process ends

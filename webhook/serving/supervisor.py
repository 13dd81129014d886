"""The serving master: forks the workers (and the certificate sync), restarts any that die, and passes
SIGTERM on. It runs no threads of its own, so forking a replacement is always safe."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger("gangkeeper.serve")

RESTART_DELAY_SECONDS = 1.0


@dataclass
class Child:
    name: str
    target: Callable[[], int]
    pid: int = 0
    started: float = field(default=0.0)


def check_port(host: str, port: int) -> None:
    """Fail before forking when the address is taken by something that is not one of ours."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def _spawn(child: Child) -> None:
    pid = os.fork()
    if pid == 0:  # the child: default signal handling, run, never return into the master's code
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        code = 1
        try:
            code = child.target()
        except BaseException:
            log.exception("serving process failed", extra={"worker": child.name})
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    child.pid, child.started = pid, time.monotonic()


def supervise(children: list[Child]) -> int:
    """Run the children until SIGTERM or SIGINT; then pass the signal on and wait for every one."""
    stopping: list[int] = []

    def stop(signum: int, _: object) -> None:
        stopping.append(signum)
        for child in children:
            if child.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for child in children:
        _spawn(child)
    while any(child.pid for child in children):
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for clarity
            continue
        dead = next((child for child in children if child.pid == pid), None)
        if dead is None:
            continue
        dead.pid = 0
        if stopping:
            continue
        log.error(
            "serving process exited; restarting it",
            extra={"worker": dead.name, "status": os.waitstatus_to_exitcode(status)},
        )
        if time.monotonic() - dead.started < RESTART_DELAY_SECONDS:
            time.sleep(RESTART_DELAY_SECONDS)  # a crash loop must not spin the CPU
        if not stopping:
            _spawn(dead)
    return 0

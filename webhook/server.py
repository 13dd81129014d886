"""`gangkeeper serve`: the admission app under gunicorn, over TLS 1.2+, reloading rotated certificates."""

from __future__ import annotations

import logging
import os
import signal
import ssl
import threading
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter

from webhook import certs

log = logging.getLogger("gangkeeper.serve")


class CertificateReloader:
    """The TLS context for new connections, rebuilt when tls.crt or tls.key change on disk.

    A Secret volume update or `gangkeeper certs` rewrites the files. Each reload builds a new context
    and swaps the reference: loading into a context in use could hand a handshake the new certificate
    with the old key. Connections already open keep what they were set up with, so a rotation never
    breaks a call in flight.
    """

    def __init__(self, cert_dir: Path, interval: float = 5.0) -> None:
        self.cert_dir, self.interval = cert_dir, interval
        self._stamp: tuple[float, float] | None = None
        self.context: ssl.SSLContext | None = None

    def _files(self) -> tuple[Path, Path]:
        return self.cert_dir / certs.CERT_FILE, self.cert_dir / certs.KEY_FILE

    def load(self) -> ssl.SSLContext:
        cert, key = self._files()
        stamp = (cert.stat().st_mtime, key.stat().st_mtime)
        if stamp == self._stamp and self.context is not None:
            return self.context
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # the pair may be caught half-written: a mismatch raises here and the current context stays
        context.load_cert_chain(str(cert), str(key))
        if self.context is not None:
            log.info("serving certificate reloaded", extra={"cert": str(cert)})
        self.context, self._stamp = context, stamp
        return context

    def watch(self) -> None:
        def loop() -> None:
            while not threading.Event().wait(self.interval):
                try:
                    self.load()
                except (OSError, ssl.SSLError):
                    log.warning("could not reload the serving certificate; keeping the current one", exc_info=True)

        threading.Thread(target=loop, name="cert-reload", daemon=True).start()


class Drain:
    """Shared by the master and its workers through a file: set on the first SIGTERM."""

    def __init__(self, directory: Path) -> None:
        self.flag = directory / "draining"

    def start(self) -> None:
        self.flag.touch()

    def active(self) -> bool:
        return self.flag.exists()


class DrainingArbiter(Arbiter):  # type: ignore[misc]
    """On SIGTERM: first report unready and answer with `Connection: close` for `drain_seconds`, so the
    endpoints controller and the API server stop sending here; then gunicorn's graceful stop, which
    finishes every request in flight."""

    drain: Drain
    drain_seconds: float = 0.0
    _draining = False

    def handle_term(self) -> None:
        if self.drain_seconds > 0 and not self._draining:
            self._draining = True
            self.drain.start()
            log.info("draining before shutdown", extra={"seconds": self.drain_seconds})
            threading.Timer(self.drain_seconds, os.kill, (os.getpid(), signal.SIGTERM)).start()
            return
        super().handle_term()


class GunicornServer(BaseApplication):  # type: ignore[misc]
    def __init__(
        self, app_factory: Any, options: dict[str, Any], drain: Drain | None = None, drain_seconds: float = 0.0
    ) -> None:
        self._factory, self._options = app_factory, options
        self._drain, self._drain_seconds = drain, drain_seconds
        super().__init__()

    def run(self) -> None:
        arbiter = DrainingArbiter(self)
        if self._drain is not None:
            arbiter.drain, arbiter.drain_seconds = self._drain, self._drain_seconds
        arbiter.run()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._factory()


def tls_context_hook(cert_dir: Path, reload_interval: float) -> Any:
    """gunicorn asks for a context on every connection: each worker answers with its reloader's current one."""
    reloaders: dict[int, CertificateReloader] = {}
    lock = threading.Lock()

    def ssl_context(conf: Any, default_factory: Any) -> ssl.SSLContext:
        pid = os.getpid()
        with lock:
            if pid not in reloaders:
                reloader = CertificateReloader(cert_dir, reload_interval)
                reloader.load()
                reloader.watch()
                reloaders[pid] = reloader
        context = reloaders[pid].context
        assert context is not None
        return context

    return ssl_context


def worker_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def gunicorn_options(
    host: str, port: int, cert_dir: Path, workers: int, threads: int, graceful_timeout: int, reload_interval: float
) -> dict[str, Any]:
    return {
        "bind": f"{host}:{port}" if ":" not in host else f"[{host}]:{port}",
        "workers": workers,
        "threads": threads,
        "worker_class": "gthread",
        "keepalive": 75,  # the API server reuses connections; keep them longer than it idles them
        "certfile": str(cert_dir / certs.CERT_FILE),
        "keyfile": str(cert_dir / certs.KEY_FILE),
        "ssl_context": tls_context_hook(cert_dir, reload_interval),
        "graceful_timeout": graceful_timeout,
        "timeout": 30,
        "accesslog": None,
        "loglevel": "warning",
        "worker_exit": worker_exit,
        "preload_app": True,
        "worker_tmp_dir": os.environ.get("GANGKEEPER_TMP", "/tmp"),
    }

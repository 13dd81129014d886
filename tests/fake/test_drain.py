"""SIGTERM during a burst: the server reports unready, drains, and drops no request it accepted."""

from __future__ import annotations

import http.client
import json
import signal
import ssl
import threading
import time
from pathlib import Path

from tests import builders as b
from tests.conftest import start_server


def test_sigterm_during_a_burst_drops_nothing(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--backend", "volcano", "--drain-seconds", "1.5", "--workers", "2")
    host, port = server.url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=server.ca)
    body = json.dumps(b.review(b.pod(labels={"batch.kubernetes.io/job-name": "train"}))).encode()
    answered, dropped, refused = [0], [], [0]
    stop = threading.Event()
    lock = threading.Lock()

    def client() -> None:
        connection: http.client.HTTPSConnection | None = None
        while not stop.is_set():
            if connection is None:
                connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
                try:
                    connection.connect()
                except OSError:  # the listener is closed: nothing was accepted, nothing can be lost
                    with lock:
                        refused[0] += 1
                    connection = None
                    time.sleep(0.05)
                    continue
            try:
                connection.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                with lock:
                    answered[0] += 1 if response.status == 200 else 0
                if response.getheader("Connection", "").lower() == "close":
                    connection.close()
                    connection = None
            except (OSError, http.client.HTTPException) as error:
                with lock:
                    dropped.append(repr(error))
                connection = None

    threads = [threading.Thread(target=client) for _ in range(6)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    before = answered[0]
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert server.get("/readyz").status_code == 503  # unready first, still answering
    server.process.wait(timeout=30)
    stop.set()
    for thread in threads:
        thread.join()
    assert before > 50 and answered[0] > before
    assert dropped == [], dropped[:3]
    assert server.process.returncode == 0

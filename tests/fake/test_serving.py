"""The serving front end under hostile and heavy clients: deadlines, ceilings, probes, bounded labels.

Each test runs `gangkeeper serve` as a process and talks to it over real sockets and TLS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import ssl
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests import builders as b
from tests.apiserver import TestApiServer
from tests.conftest import Server, start_server, stop_server
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.handler import Handler


@pytest.fixture
def fast_deadlines(tmp_path: Path) -> Iterator[Server]:
    running = start_server(
        tmp_path, "--backend", "volcano", "--handshake-timeout", "1", "--header-timeout", "1", "--body-timeout", "1"
    )
    yield running
    stop_server(running)


def address(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("https://").split(":")
    return host, int(port)


def tls_connection(server: Server) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=server.ca)
    return context.wrap_socket(socket.create_connection(address(server), timeout=10), server_hostname="localhost")


def job_pod_body() -> bytes:
    return json.dumps(b.review(b.pod(labels={"batch.kubernetes.io/job-name": "train"}))).encode()


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed `sock` within `seconds`, and what it sent before closing."""
    sock.settimeout(seconds)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        return False, received
    except (ConnectionResetError, ssl.SSLError):
        pass
    return True, received


def test_a_thousand_silent_connections_do_not_stall_other_clients(server: Server) -> None:
    """Silent TCP (no handshake) and silent TLS (no request) connections cost a slot, never a worker."""
    silent: list[socket.socket] = [socket.create_connection(address(server)) for _ in range(768)]
    silent += [tls_connection(server) for _ in range(256)]
    try:
        started = time.monotonic()
        for _ in range(20):
            answer = server.post("/mutate", job_pod_body())
            assert answer.status_code == 200
        assert time.monotonic() - started < 2.0  # 20 calls, each a new connection and handshake
    finally:
        for sock in silent:
            sock.close()


def test_at_the_connection_cap_the_idlest_connection_makes_room(tmp_path: Path) -> None:
    """Silent connections fill the cap: the API server's next call still gets in, the connection idle
    the longest is closed for it (refusing the new one would hand the webhook to whoever came first)."""
    server = start_server(tmp_path, "--backend", "volcano", "--max-connections", "32", "--idle-timeout", "120")
    try:
        silent = [tls_connection(server) for _ in range(32)]
        time.sleep(0.3)
        for _ in range(5):
            assert server.post("/mutate", job_pod_body()).status_code == 200
        closed, _ = closed_within(silent[0], 2.0)
        assert closed, "the oldest idle connection was closed to make room"
        for sock in silent:
            sock.close()
    finally:
        stop_server(server)


def test_connections_that_never_speak_are_bounded_and_cut_off(tmp_path: Path) -> None:
    """An accepted connection holds no TLS state until its ClientHello comes, but a socket: a burst of
    silent ones is bounded by --max-waiting-connections. Over it the one waiting longest is closed and the
    new one waits in its place (under a burst, Go's transport leaves old dials nobody waits for, and a
    call that waits for its own dial failed when the newest was refused); the handshake deadline cuts
    the rest. Repeated because the connection counts are kept across callbacks of the loop and a close
    (one run in five once let a fifth in)."""
    for _ in range(3):
        server = start_server(
            tmp_path, "--backend", "volcano", "--max-waiting-connections", "4", "--handshake-timeout", "2"
        )
        try:
            silent = [socket.create_connection(address(server)) for _ in range(4)]  # TCP only: no ClientHello
            time.sleep(0.3)
            connection = tls_connection(server)  # a fifth: the oldest silent one makes room for it
            assert closed_within(silent[0], 1.0)[0], "the connection waiting longest was closed at once"
            assert not any(closed_within(sock, 0.2)[0] for sock in silent[1:]), "only the oldest one"
            connection.close()
            assert all(closed_within(sock, 4.0)[0] for sock in silent[1:]), "the handshake deadline cut them"
            time.sleep(0.2)  # the worker forgets each connection when its socket is closed
            assert server.post("/mutate", job_pod_body()).status_code == 200
            for sock in silent:
                sock.close()
        finally:
            stop_server(server)


def stalled_handshakes(server: Server, count: int) -> list[socket.socket]:
    """Connections that send the first bytes of a ClientHello and nothing more: handshakes under way."""
    stalled = [socket.create_connection(address(server)) for _ in range(count)]
    for sock in stalled:
        sock.sendall(b"\x16\x03\x01")
    return stalled


def test_handshakes_under_way_count_against_the_connection_cap(tmp_path: Path) -> None:
    """A handshake holds TLS state (about 60 KiB) from its start: stalled handshakes are bounded by the
    connection cap with the established connections (over it a new one is closed before its handshake),
    and once the deadline cuts them there is room again. (Before any cap: 16,384 silent handshakes
    took the chart's pod to 1.1 GiB.)"""
    server = start_server(tmp_path, "--backend", "volcano", "--max-connections", "4", "--handshake-timeout", "2")
    try:
        stalled = stalled_handshakes(server, 4)
        time.sleep(0.5)  # each holds a turn for at most 10 ms: all four are under way
        with pytest.raises((ssl.SSLError, OSError)):
            tls_connection(server)
        assert all(closed_within(sock, 4.0)[0] for sock in stalled), "the handshake deadline cut them"
        time.sleep(0.2)
        assert server.post("/mutate", job_pod_body()).status_code == 200
    finally:
        stop_server(server)


def test_stalled_handshakes_keep_no_one_waiting_for_their_turn(tmp_path: Path) -> None:
    """Handshakes are worked on two at a time (a burst of them must not starve the requests of the
    connections already open), but a stalled one holds its turn 10 ms at most: eight clients that stall
    their ClientHello delay a new connection by a fraction of a second, not by their 5 s deadline."""
    server = start_server(tmp_path, "--backend", "volcano")
    try:
        stalled = stalled_handshakes(server, 8)
        time.sleep(0.1)
        started = time.monotonic()
        connection = tls_connection(server)
        assert time.monotonic() - started < 2.0, "a new connection waited for the stalled handshakes' deadline"
        connection.close()
        for sock in stalled:
            sock.close()
    finally:
        stop_server(server)


def test_a_client_that_never_finishes_the_handshake_is_cut_off(fast_deadlines: Server) -> None:
    sock = socket.create_connection(address(fast_deadlines))
    sock.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, and nothing more
    closed, _ = closed_within(sock, 4.0)
    assert closed


def test_headers_trickled_slower_than_the_deadline_get_408_and_a_close(fast_deadlines: Server) -> None:
    tls = tls_connection(fast_deadlines)
    started = time.monotonic()
    for byte in b"POST /mutate HTTP/1.1\r\nHost: x\r\n":  # a byte every 0.1 s: the deadline is for all of them
        try:
            tls.send(bytes([byte]))
        except OSError:
            break
        time.sleep(0.1)
        if time.monotonic() - started > 3.0:
            break
    closed, received = closed_within(tls, 4.0)
    assert closed and received.startswith(b"HTTP/1.1 408")
    assert b'"code":408' in received and time.monotonic() - started < 5.0


def test_a_body_that_never_arrives_gets_408(fast_deadlines: Server) -> None:
    tls = tls_connection(fast_deadlines)
    tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
    closed, received = closed_within(tls, 4.0)
    assert closed and received.startswith(b"HTTP/1.1 408")


def test_requests_beyond_the_in_flight_budget_get_429_with_retry_after(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--backend", "volcano", "--max-in-flight-mib", "1", "--body-timeout", "10")
    try:
        holder = tls_connection(server)  # announces 900 kB and sends it slowly: it holds the budget
        holder.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 900000\r\n\r\n{")
        time.sleep(0.3)
        started = time.monotonic()
        answer = requests.post(
            server.url + "/mutate",
            data=b"{" + b" " * 300_000 + b"}",
            headers={"Content-Type": "application/json"},
            verify=server.ca,
            timeout=10,
        )
        assert answer.status_code == 429 and time.monotonic() - started < 1.0
        assert answer.headers["Retry-After"] == "1" and "overloaded" in answer.json()["error"]
        holder.close()
        time.sleep(0.3)  # the budget comes back when its holder goes
        assert server.post("/mutate", job_pod_body()).status_code == 200
        metrics = server.get("/metrics").text
        assert 'gangkeeper_http_refused_requests_total{code="429"} 1.0' in metrics
    finally:
        stop_server(server)


def test_chunked_bodies_count_against_the_in_flight_budget(tmp_path: Path) -> None:
    """A chunked body announces no length: it takes from the budget as its chunks arrive, so many
    slow chunked bodies cannot put a worker past its in-flight bytes."""
    server = start_server(tmp_path, "--backend", "volcano", "--max-in-flight-mib", "1", "--body-timeout", "10")
    try:
        first = tls_connection(server)  # holds a small reservation, so the next is not alone in flight
        first.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{")
        holder = tls_connection(server)
        holder.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b" " * 200_000
        for _ in range(10):  # 2 MB in all, twice the budget
            try:
                holder.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                break
            time.sleep(0.05)
        closed, answer = closed_within(holder, 3.0)
        assert closed and answer.startswith(b"HTTP/1.1 429"), answer[:200]
        first.close()
        holder.close()
        time.sleep(0.3)  # the budget comes back when its holders go
        assert server.post("/mutate", job_pod_body()).status_code == 200
    finally:
        stop_server(server)


def test_a_body_announced_over_the_cap_gets_413_before_it_is_sent(server: Server) -> None:
    tls = tls_connection(server)
    tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n")
    closed, received = closed_within(tls, 4.0)
    assert closed and received.startswith(b"HTTP/1.1 413") and b"exceeds" in received


def test_an_answer_carries_one_content_length(server: Server) -> None:
    """The app's own Content-Length is not sent beside the server's: one header, the body's length."""
    connection = tls_connection(server)
    body = job_pod_body()
    head = f"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    connection.sendall(head.encode() + b"\r\nConnection: close\r\n\r\n" + body)
    _, received = closed_within(connection, 5.0)
    headers, _, answer = received.partition(b"\r\n\r\n")
    lengths = [line for line in headers.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    assert lengths == [f"Content-Length: {len(answer)}".encode()], headers
    assert json.loads(answer)["response"]["allowed"] is True


def test_garbage_instead_of_http_gets_400_json(server: Server) -> None:
    tls = tls_connection(server)
    tls.sendall(b"\x00\x01 not http at all\r\n\r\n")
    closed, received = closed_within(tls, 4.0)
    assert closed and received.startswith(b"HTTP/1.1 400") and b"application/json" in received


def envelope(**request: object) -> bytes:
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", **request}}
    ).encode()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 5000 + b"]" * 5000, "nests deeper than 100"),
        (b'{"a":' * 2000 + b"1" + b"}" * 2000, "nests deeper than 100"),
        (envelope(operation="CREATE", kind="Pod", object={}), "request.kind must be a JSON object"),
        (envelope(operation="CREATE", kind={"kind": 7}, object={}), "request.kind.kind must be a string"),
        (envelope(operation="CREATE", kind={"kind": "Pod"}, namespace=["x"], object={}), "request.namespace"),
        (envelope(operation="CREATE", kind={"kind": "Pod"}, dryRun="yes", object={}), "request.dryRun"),
        (envelope(operation=["CREATE"], kind={"kind": "Pod"}, object={}), "unknown operation"),
        (envelope(operation="CREATE", kind={"kind": "Pod"}, object={"metadata": []}), "metadata must be"),
        (
            envelope(operation="CREATE", kind={"kind": "Pod"}, object={"metadata": {"labels": {"a": 1}}}),
            "metadata.labels must map strings to strings",
        ),
        (envelope(operation="CREATE", kind={"kind": "Pod"}, object={"spec": "x"}), "request.object.spec"),
        (envelope(operation="CREATE", kind={"kind": "Pod"}, userInfo="root", object={}), "request.userInfo"),
    ],
    ids=[
        "array-bomb",
        "object-bomb",
        "kind-string",
        "kind-kind-number",
        "namespace-list",
        "dryrun-string",
        "operation-list",
        "metadata-list",
        "labels-numbers",
        "spec-string",
        "userinfo-string",
    ],
)
def test_malformed_reviews_get_a_json_400_naming_the_problem(server: Server, body: bytes, reason: str) -> None:
    answer = server.post("/mutate", body)
    assert answer.status_code == 400 and answer.headers["Content-Type"] == "application/json"
    assert reason in answer.json()["error"]


def test_metric_labels_come_from_a_fixed_set(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--backend", "volcano")
    try:
        for index in range(200):
            pod = b.pod(labels={"batch.kubernetes.io/job-name": "train"})
            review = b.review(pod)
            review["request"]["kind"] = {"group": "", "version": "v1", "kind": f"Junk{index}"}
            assert server.post("/mutate", json.dumps(review).encode()).status_code == 200
        assert server.post("/mutate", job_pod_body()).status_code == 200
        metrics = server.get("/metrics").text
        assert "Junk" not in metrics
        assert 'kind="other"' in metrics and 'kind="Pod"' in metrics
    finally:
        stop_server(server)


def large_job_review(entries: int = 40_000) -> bytes:
    job = b.job()
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": f"VAR_{i}", "value": "x" * 40} for i in range(entries)
    ]
    return json.dumps(b.review(job)).encode()


def test_a_review_near_the_size_cap_costs_a_bounded_multiple_of_its_size() -> None:
    """The parsed tree plus the copy the mutator edits: what one large review can hold at once. The
    server runs large reviews one at a time per process, so this bounds a process's peak."""
    handler = Handler(build_resolver(WebhookSettings(backend="volcano")))
    handler.handle("mutate", job_pod_body())  # imports and caches are not the request's cost
    body = large_job_review()
    assert 2_500_000 < len(body) < 3 * 1024 * 1024
    tracemalloc.start()
    try:
        started = time.process_time()
        status, document = handler.handle("mutate", body)
        cpu = time.process_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 200 and document["response"]["allowed"] is True
    assert peak < 20 * len(body), f"{peak / len(body):.1f}x the body"
    assert cpu < 5.0  # under tracemalloc; about 0.2 s without it


def test_probes_answer_while_large_reviews_run(server: Server) -> None:
    """Within the kubelet's probe timeout (timeoutSeconds, 1 s by default; the chart sets none): a probe
    that waited behind large reviews would fail the pod's readiness while it serves."""
    body = large_job_review()
    stop = threading.Event()
    answered = [0]

    def send_large() -> None:
        while not stop.is_set():
            assert server.post("/mutate", body).status_code == 200
            answered[0] += 1

    sender = threading.Thread(target=send_large)
    sender.start()
    slowest = 0.0
    try:
        time.sleep(0.3)
        for _ in range(20):
            started = time.monotonic()
            assert server.get("/readyz").status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.05)
    finally:
        stop.set()
        sender.join()
    assert answered[0] >= 1 and slowest < 1.0


def test_the_webhook_stays_within_its_pods_memory_share_under_both_attacks_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deployed configuration's memory ceiling, as a test: silent TLS connections at twice the
    per-process cap plus clients sending oversized chunked bodies, against two workers, whose share of
    the chart's 768Mi limit (four workers) is 384 MiB, with the container's malloc settings.
    bench/webhook_memory.py measures the chart's four. Measured here: 290-295 MiB with the attack holding
    2,000-2,040 connections; 540 MiB without the chart's MALLOC_MMAP_THRESHOLD_ (the TLS read buffers
    in the heap, see webhook/cli/serve.py _map_large_buffers), 350 MiB with only the in-process fallback."""
    from bench import webhook_memory

    malloc = webhook_memory.deployed_malloc_env()
    assert malloc, "the chart sets the webhook's malloc settings"
    for name, value in malloc.items():
        monkeypatch.setenv(name, value)
    workers, cap = 2, 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 2 * cap * workers + 512), hard), hard))
    server = start_server(tmp_path, "--backend", "volcano", "--workers", str(workers), "--max-connections", str(cap))
    try:
        time.sleep(1)
        attack = argparse.Namespace(workers=workers, silent=2 * cap, chunked=16, seconds=15.0)
        figures = asyncio.run(webhook_memory.attack(server.url, server.ca, server.process.pid, attack))
        assert server.post("/mutate", job_pod_body()).status_code == 200, "still serving after the attack"
    finally:
        stop_server(server)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    peak = figures["peak"]
    assert isinstance(peak, dict)
    share = webhook_memory.LIMIT_MIB * workers / 4
    assert peak["pss_mib"] <= share, f"{peak['pss_mib']} MiB over {share} MiB: {figures}"
    held = figures["silent_connections_held"]  # as the server counts them: the cap's own figure
    assert isinstance(held, int) and held <= cap * workers, f"the cap let {held} silent connections in"
    # the count is real: the attack, opening them a few dozen at a time, held about the cap (2,000-2,040)
    assert held >= cap // 4, f"the attack held only {held} connections open: {figures}"


def test_a_hung_api_server_holds_one_review_to_its_deadline_and_no_other(
    tmp_path: Path, apiserver: TestApiServer
) -> None:
    """A gang pod's review reads its Job's uid from the API server, which hangs: the review is answered
    within its read's deadline (one for all retries; the chart's webhook timeout is 5 s), and the
    reviews that need no read are answered meanwhile, not queued behind it on the worker's loop."""
    import yaml

    from webhook.admission.workloads import READ_SECONDS

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "t", "cluster": {"server": apiserver.url}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
                "current-context": "t",
            }
        )
    )
    hung = threading.Event()

    def hangs(method: str, path: str) -> None:
        if method == "GET" and path.endswith("/jobs/train"):  # every attempt: the hook is kept
            hung.set()
            time.sleep(READ_SECONDS + 3)

    apiserver.store.fail_next.append(hangs)
    lease = {"metadata": {"name": "gangkeeper-controller"}, "spec": {"holderIdentity": "c", "renewTime": "now"}}
    apiserver.store.create("coordination.k8s.io/v1", "leases", "gangkeeper-system", lease)
    namespace = {"metadata": {"name": "team-a", "labels": {"gangkeeper.io/enabled": "true"}}}
    apiserver.store.create("v1", "namespaces", "", namespace)
    server = start_server(tmp_path, "--backend", "gate", "--kubeconfig", str(kubeconfig))
    try:
        from tests.fake.test_membership import copied

        pod = copied(owner=("batch/v1", "Job", "train"))  # a pod of Job train's gang, for the Job of this uid
        pod["metadata"]["ownerReferences"][0]["uid"] = "uid-of-train"
        reading = json.dumps(b.review(pod, uid="reads")).encode()
        took: dict[str, float] = {}

        def post_reading() -> None:
            started = time.monotonic()
            answer = server.post("/mutate", reading)
            took["reading"] = time.monotonic() - started
            assert answer.status_code == 200 and answer.json()["response"]["allowed"] is True, answer.json()

        reader = threading.Thread(target=post_reading)
        reader.start()
        assert hung.wait(10)
        others = []
        for i in range(10):
            started = time.monotonic()
            answer = server.post("/mutate", json.dumps(b.review(b.pod(f"web-{i}"), uid=f"o-{i}")).encode())
            others.append(time.monotonic() - started)
            assert answer.status_code == 200
        reader.join(15)
        assert not reader.is_alive()
        assert max(others) < 0.5, others  # answered while the read hangs
        assert took["reading"] < READ_SECONDS + 1.0, took  # given up at its deadline, the pod admitted
        assert "reading" in took
    finally:
        stop_server(server)

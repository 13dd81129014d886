"""The deployed webhook's memory under the two attacks that hold it, at once.

`gangkeeper serve` runs with the chart's arguments (4 workers, the default limits) while
- --chunked clients POST chunked bodies larger than the body limit, over and over (each is refused with
  413 once it passes the limit; a chunked body announces no length, so it is read until then), and
- --silent connections per worker complete their TLS handshake and then send nothing, held until the
  idle deadline closes them.

It prints the process tree's memory (the sum of every process's proportional set size, what the
kernel charges the pod's cgroup for, within a few MiB; and the largest worker's RSS) before, at the
peak, and after both stop, next to the pod's limit (768Mi, charts/gangkeeper/values.yaml). Raises the
open-files limit for the client; run as root for the full figure.

    python bench/webhook_memory.py [--workers 4] [--silent 4096] [--chunked 64] [--headers 0] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import ssl
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import start_server, stop_server
from tests.deployed import MANIFESTS, container_of

LIMIT_MIB = 768
OPENING_AT_ONCE = 64  # silent connections mid-handshake at once


def deployed_malloc_env() -> dict[str, str]:
    """The webhook container's glibc malloc settings, as the release manifest gives them."""
    objects = [o for o in yaml.safe_load_all((MANIFESTS / "base" / "gangkeeper.yaml").read_text()) if o]
    env = container_of(objects, "gangkeeper-webhook").env("gangkeeper-webhook-0")
    return {name: value for name, value in env.items() if name.startswith("MALLOC_")}


def tree(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(p for c in children for p in tree(int(c)))]


def memory(pid: int) -> dict[str, float]:
    """MiB: the tree's proportional set size (shared pages split between the processes), its largest RSS."""
    pss = rss = 0.0
    for process in tree(pid):
        try:
            rollup = Path(f"/proc/{process}/smaps_rollup").read_text().splitlines()
        except OSError:  # a worker that just exited
            continue
        fields = {line.split(":")[0]: int(line.split()[1]) for line in rollup[1:]}
        pss += fields["Pss"] / 1024
        rss = max(rss, fields["Rss"] / 1024)
    return {"pss_mib": round(pss, 1), "largest_rss_mib": round(rss, 1)}


async def chunked_client(host: str, port: int, context: ssl.SSLContext, stop: float, counts: dict[str, int]) -> None:
    chunk = b"x" * 65536
    framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
            writer.write(
                b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            sent = 0
            while sent < 8 * 1024 * 1024 and not reader.at_eof():
                writer.write(framed)
                await writer.drain()
                sent += len(chunk)
            status = await asyncio.wait_for(reader.readline(), 10)
            answer = status.split(b" ")[1].decode() if status else "closed"
            counts[answer] = counts.get(answer, 0) + 1
            writer.close()
        except (TimeoutError, OSError, ssl.SSLError, IndexError):
            counts["reset"] = counts.get("reset", 0) + 1


async def headers_client(host: str, port: int, context: ssl.SSLContext, stop: float, counts: dict[str, int]) -> None:
    """60,000 one-byte headers (under the 64 KiB of header text), then nothing: each once held 4.5 MiB of
    a worker's memory until its 408 (issue 97); now refused at its 101st header."""
    head = b"POST /mutate HTTP/1.1\r\nHost: x\r\n" + b"".join(b"%x: a\r\n" % i for i in range(60_000))
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
            writer.write(head)
            await writer.drain()
            status = await asyncio.wait_for(reader.readline(), 10)
            answer = status.split(b" ")[1].decode() if status else "closed"
            counts[answer] = counts.get(answer, 0) + 1
            writer.close()
        except (TimeoutError, OSError, ssl.SSLError, IndexError):
            counts["reset"] = counts.get("reset", 0) + 1


async def silent_connection(
    host: str, port: int, context: ssl.SSLContext, hold: float, held: list[int], opening: asyncio.Semaphore
) -> None:
    try:
        async with opening:
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
    except (OSError, ssl.SSLError) as error:
        held[1] += 1
        if held[1] == 1:
            print(f"first refused silent connection: {error!r}", file=sys.stderr)
        return
    held[0] += 1  # open now: the server may close it to make room for a newer one
    try:
        await asyncio.wait_for(reader.read(1), hold)  # the server closes it, or we give up
    except (TimeoutError, OSError, ssl.SSLError):
        pass
    finally:
        held[0] -= 1
        writer.close()


def open_connections(url: str, context: ssl.SSLContext) -> int:
    """TLS connections the server's workers hold, from its metrics (0 when it does not answer in time)."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", context=context, timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return 0
    series = 'gangkeeper_webhook_connections{state="open"} '
    return sum(int(float(line.removeprefix(series))) for line in text.splitlines() if line.startswith(series))


async def attack(url: str, ca: str, pid: int, args: argparse.Namespace) -> dict[str, object]:
    host, port = url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=ca)
    held = [0, 0]
    counts: dict[str, int] = {}
    stop = time.monotonic() + args.seconds
    # handshakes started a few dozen at a time, as fast as the server completes them: all at once, the
    # ones queued past the server's handshake deadline are closed unheld, and on a loaded machine the
    # attack then held a few dozen connections instead of filling the cap (tests/fake/test_serving.py)
    opening = asyncio.Semaphore(OPENING_AT_ONCE)
    silent = [
        asyncio.create_task(silent_connection(host, int(port), context, args.seconds + 5, held, opening))
        for _ in range(args.silent * args.workers)
    ]
    chunked = [asyncio.create_task(chunked_client(host, int(port), context, stop, counts)) for _ in range(args.chunked)]
    chunked += [
        asyncio.create_task(headers_client(host, int(port), context, stop, counts))
        for _ in range(getattr(args, "headers", 0))  # tests/fake/test_serving.py passes its own arguments
    ]
    peak: dict[str, float] = {"pss_mib": 0.0, "largest_rss_mib": 0.0}
    held_most = open_most = 0
    while time.monotonic() < stop:
        await asyncio.sleep(1)
        now = memory(pid)
        peak = {k: max(peak[k], now[k]) for k in peak}
        held_most = max(held_most, held[0])
        open_most = max(open_most, await asyncio.to_thread(open_connections, url, context))
    await asyncio.gather(*chunked)
    for task in silent:
        task.cancel()
    await asyncio.gather(*silent, return_exceptions=True)
    return {
        "peak": peak,
        # the server's own count (its workers sample it each second): what its cap bounds; the clients'
        # count also holds connections the server closed to make room that they have not yet seen close
        "silent_connections_held": open_most,
        "silent_connections_seen_open": held_most,
        "silent_connections_refused": held[1],
        "chunked_answers": counts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4, help="the chart's webhook.workers")
    parser.add_argument("--silent", type=int, default=4096, help="silent connections per worker")
    parser.add_argument("--chunked", type=int, default=64, help="clients sending oversized chunked bodies")
    parser.add_argument("--headers", type=int, default=0, help="clients sending 60,000 one-byte headers each")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("serve_args", nargs="*", help="extra `gangkeeper serve` flags (after --)")
    args = parser.parse_args()
    wanted = args.silent * args.workers + args.chunked + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, wanted), hard), hard))
    os.environ.update(deployed_malloc_env())  # the server inherits the container's environment
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), "--backend", "volcano", "--workers", str(args.workers), *args.serve_args)
        try:
            time.sleep(2)
            before = memory(server.process.pid)
            during = asyncio.run(attack(server.url, server.ca, server.process.pid, args))
            time.sleep(2)
            after = memory(server.process.pid)
        finally:
            stop_server(server)
    figures = {"workers": args.workers, "limit_mib": LIMIT_MIB, "before": before, **during, "after": after}
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

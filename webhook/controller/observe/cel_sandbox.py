"""Tenants' CEL device selectors evaluated out of process, each evaluation within a CPU budget.

Why a process: cel-python evaluates in Python and in `re`, and both hold the GIL for as long as a call
runs. Its `duration()` parses with a backtracking regular expression, so `duration("aaa…a!")` costs about
2^N steps in one call (N=26: 4-9 s; N=40: a day), and `matches()` runs the tenant's own pattern on
Python's backtracking engine (kube-apiserver's cel-go uses RE2, linear). kube-apiserver accepts such
selectors: its cost estimate charges a call a constant and checks only literal arguments. In the
controller's process one of them would stop every pass, the informers, the health endpoints and the
leader Lease. Here the controller waits on a pipe (the GIL free for its other threads) while a worker
(cel_worker.py) evaluates, and stops the worker when one evaluation has used CPU_BUDGET_SECONDS of CPU
(or WALL_LIMIT_SECONDS of wall time). That expression is then over budget: an error for the gangs that
use it (the devices check names it), never evaluated again while its text is the same.

A stopped worker's place is taken by a spare started beside the pass that stopped one (no evaluation
waits 1-2 s for a worker's imports), and the stop is charged to the expression's namespace as its
budget and KILL_CHARGE_SECONDS more: with its share of a pass (cel_budget.py), a namespace stops at
most one worker a pass, however many distinct expressions over budget it has. cel-python takes 0.3-2
ms for a usual selector, cel-cpp (device_cel_fast.py) about 20 us for a plain one.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from webhook.controller.decide import device_cel
from webhook.controller.decide.devices import BoundedMap
from webhook.controller.observe.cel_worker import MAX_BATCH_PAIRS, OUTCOMES, PROGRESS, SHARED_BYTES

log = logging.getLogger(__name__)

CPU_BUDGET_SECONDS = 0.5  # of CPU for one selector on one device: about 250 times a usual one's
WALL_LIMIT_SECONDS = 10.0  # for one evaluation, however little CPU the worker was given
START_LIMIT_SECONDS = 60.0  # for a new worker's first answer (its imports) on a loaded machine
POLL_SECONDS = 0.02
MAX_OVER_BUDGET = 4096  # expressions remembered as over budget, least recent out
RETRY_AFTER_SECONDS = 5.0  # a worker that could not start is tried again after this
# what stopping a worker costs beyond its budget, charged to the expression's namespace (cel_budget.py):
# the spare's start (about a second of CPU, beside the pass); so a namespace stops at most one a pass
KILL_CHARGE_SECONDS = 0.5
_TICKS = os.sysconf("SC_CLK_TCK")

Pair = tuple[str, device_cel.DeviceFacts]
NOT_STARTED = "cannot evaluate CEL now: its worker did not start"
ENDED = "ended its worker"


class CelSandbox:
    """The controller's device_cel.Evaluator: one worker process, started when first needed, stopped
    and started again when an evaluation runs over budget."""

    def __init__(self, cpu_budget: float = CPU_BUDGET_SECONDS, wall_limit: float = WALL_LIMIT_SECONDS) -> None:
        self.cpu_budget = cpu_budget
        self.wall_limit = wall_limit
        self.over_budget: BoundedMap[str, device_cel.SelectorError] = BoundedMap(MAX_OVER_BUDGET)
        self.stopped = 0  # workers stopped for an expression over budget (a metric)
        # CPU seconds the workers spent evaluating, their starts not included: the clock tenants are charged
        # by (cel_budget.TenantBudget)
        self.cpu_spent = 0.0
        self._lock = threading.Lock()
        self._worker: subprocess.Popen[bytes] | None = None
        self._progress: mmap.mmap | None = None
        self._spare: tuple[subprocess.Popen[bytes], mmap.mmap] | None = None  # `_start_spare`
        self._batch = 0
        self._down_until = 0.0

    def __call__(self, pairs: Sequence[Pair]) -> list[device_cel.Outcome]:
        with self._lock:
            outcomes: list[device_cel.Outcome | None] = [None] * len(pairs)
            todo = list(range(len(pairs)))
            while todo:
                todo = [i for i in todo if not self._known(pairs[i], outcomes, i)]
                if not todo:
                    break
                if time.monotonic() < self._down_until:
                    for i in todo:
                        outcomes[i] = device_cel.SelectorError(NOT_STARTED, transient=True)
                    break
                now, todo = todo[:MAX_BATCH_PAIRS], todo[MAX_BATCH_PAIRS:]
                todo = self._run([pairs[i] for i in now], now, outcomes) + todo
            return [o if o is not None else False for o in outcomes]

    def close(self) -> None:
        with self._lock:
            self._stop()
            spare, self._spare = self._spare, None
            if spare is not None:
                _end(*spare)

    def _known(self, pair: Pair, outcomes: list[device_cel.Outcome | None], at: int) -> bool:
        over = self.over_budget.get(pair[0])
        if over is not None:
            outcomes[at] = over
        return over is not None

    def _run(self, batch: list[Pair], places: list[int], outcomes: list[device_cel.Outcome | None]) -> list[int]:
        """Sends the batch; the places still to evaluate (a worker stopped midway) are returned."""
        worker = self._ensure()
        if worker is None:
            for place in places:
                outcomes[place] = device_cel.SelectorError(NOT_STARTED, transient=True)
            return []
        self._batch += 1
        assert worker.stdin is not None and worker.stdout is not None
        try:
            # each expression's text once (up to 10 KiB), each pair an index into that table
            table: dict[str, int] = {}
            sent = [[table.setdefault(expression, len(table)), facts] for expression, facts in batch]
            worker.stdin.write(json.dumps([self._batch, list(table), sent]).encode() + b"\n")
            worker.stdin.flush()
        except OSError:
            self._stop()
            self._down_until = time.monotonic() + RETRY_AFTER_SECONDS
            return places
        answered: list[Any] = []  # the outcomes handed over so far, in the batch's order
        reply = self._await(worker, worker.stdout.fileno(), answered)
        for place, outcome in zip(places, answered, strict=False):
            outcomes[place] = _decode(outcome)
        if isinstance(reply, bool):  # answered whole
            return []
        if reply is None:
            self._down_until = time.monotonic() + RETRY_AFTER_SECONDS
            return places[len(answered) :]
        index, why = reply  # the pair that ran over budget, or that the worker ended on
        expression = batch[index][0]
        self.stopped += 1
        self.over_budget[expression] = device_cel.SelectorError(
            f"CEL {expression[:200]!r} {why}: not evaluated again until it changes",
            over_budget=True,
            # a worker that ended (a crash, its memory) may be this process's fault, not the expression's:
            # kept by this process only, never handed to the next leader (cel_budget.py)
            ended=why == ENDED,
        )
        log.warning("a device selector %s and is not evaluated again: %.200r", why, expression)
        self._ensure()  # the spare, when there is one: its imports done beside the last pass
        self._start_spare()
        return places[len(answered) :]  # what it answered before is kept, not asked again

    def _await(self, worker: subprocess.Popen[bytes], fd: int, answered: list[Any]) -> bool | tuple[int, str] | None:
        """True once the batch is answered (its outcomes appended to `answered` piece by piece, as the
        worker hands them over); else (the index of the pair it was stopped on, why), or None when the
        worker did not start."""
        buffer = bytearray()
        current, since, cpu_since = -1, time.monotonic(), 0.0
        # poll, not select: a controller (or a test run) with a thousand descriptors open gets pipes past
        # select's FD_SETSIZE of 1024, which it refuses
        waiting = select.poll()
        waiting.register(fd, select.POLLIN)
        while True:
            ready = waiting.poll(POLL_SECONDS * 1000)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if chunk:
                    buffer += chunk
                    if self._pieces(buffer, answered):
                        return True
                    continue
            assert self._progress is not None
            batch_now, index = PROGRESS.unpack_from(self._progress, 0)
            now = time.monotonic()
            if ready:  # the worker ended: on the pair it was evaluating, or before its first one
                code = worker.wait()
                log.warning("the CEL worker ended (exit %s): %s", code, _last_words(worker))
                if batch_now == self._batch:
                    self._answered_before(index, answered)
                self._stop()
                return (index, ENDED) if batch_now == self._batch and index >= 0 else None
            if batch_now != self._batch:  # still starting (its imports)
                if now - since > START_LIMIT_SECONDS:
                    log.warning("the CEL worker did not start in %s s", START_LIMIT_SECONDS)
                    self._stop()
                    return None
                continue
            if index != current:
                current, since, cpu_since = index, now, _cpu_seconds(worker.pid)
                continue
            used = _cpu_seconds(worker.pid) - cpu_since
            if used >= self.cpu_budget or now - since >= self.wall_limit:
                # charged whole however little CPU it was given, and again for the worker that takes its place
                self.cpu_spent += max(used, self.cpu_budget) + KILL_CHARGE_SECONDS
                self._drain(waiting, fd, buffer, answered)  # pieces it handed over before it was stopped
                self._answered_before(index, answered)
                self._stop()
                return index, f"ran over its budget ({self.cpu_budget:g} s of CPU on one device)"

    def _pieces(self, buffer: bytearray, answered: list[Any]) -> bool:
        """The whole lines in `buffer` taken out of it, their outcomes appended to `answered` and their CPU
        charged; whether the batch's last one was among them."""
        *lines, rest = buffer.split(b"\n")
        buffer[:] = rest
        last = False
        for line in lines:
            piece, cpu, last = json.loads(line)
            answered.extend(piece)
            self.cpu_spent += float(cpu)
        return bool(last)

    def _drain(self, waiting: select.poll, fd: int, buffer: bytearray, answered: list[Any]) -> None:
        """What a worker about to be stopped has written and not been read (it evaluates on meanwhile)."""
        while waiting.poll(0):
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return
            buffer += chunk
            self._pieces(buffer, answered)

    def _answered_before(self, index: int, answered: list[Any]) -> None:
        """The outcomes of the pairs before `index` not handed over yet, from the bytes the worker wrote
        for them (an error is handed over at once, so each of these is true or false)."""
        assert self._progress is not None
        told = {byte: outcome for outcome, byte in OUTCOMES.items()}
        for at in range(len(answered), index):
            byte = self._progress[PROGRESS.size + at]
            if byte not in told:
                return
            answered.append(told[byte])

    def _ensure(self) -> subprocess.Popen[bytes] | None:
        if self._worker is not None and self._worker.poll() is None:
            return self._worker
        self._stop()
        spare, self._spare = self._spare, None
        if spare is not None and spare[0].poll() is None:  # started beside the last pass: its imports done
            self._worker, self._progress = spare
            return self._worker
        if spare is not None:
            _end(*spare)
        started = self._spawn()
        if started is None:
            return None
        self._worker, self._progress = started
        return self._worker

    def _spawn(self) -> tuple[subprocess.Popen[bytes], mmap.mmap] | None:
        """A worker started, with the progress memory it shares (by fd: the image's file system is
        read only); None when it could not be."""
        fd = os.memfd_create("gangkeeper-cel-progress")
        progress: mmap.mmap | None = None
        try:
            os.write(fd, PROGRESS.pack(-1, -1) + bytes(SHARED_BYTES - PROGRESS.size))
            progress = mmap.mmap(fd, SHARED_BYTES)
            worker = subprocess.Popen(
                [_interpreter(), "-m", "webhook.controller.observe.cel_worker", str(fd)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,  # read only once it ended: a traceback, well inside a pipe's buffer
                pass_fds=(fd,),
                # no warnings: nothing but a traceback is written where no one reads until the end
                env={**os.environ, "PYTHONPATH": os.pathsep.join(_import_path()), "PYTHONWARNINGS": "ignore"},
            )
        except OSError as error:
            log.warning("cannot start the CEL worker: %s", error)
            if progress is not None:
                progress.close()
            return None
        finally:
            os.close(fd)
        weakref.finalize(self, worker.kill)  # a controller dropped (tests, a restart) takes it along
        return worker, progress

    def _start_spare(self) -> None:
        """A worker started now, beside the pass, to take the place of one stopped for an expression over
        budget: the next evaluation, another team's perhaps, does not wait 1-2 s for a worker's imports.
        Only once a worker was stopped: a controller whose tenants never run over budget runs one."""
        if self._spare is None or self._spare[0].poll() is not None:
            if self._spare is not None:
                _end(*self._spare)
            self._spare = self._spawn()

    def _stop(self) -> None:
        worker, self._worker = self._worker, None
        progress, self._progress = self._progress, None
        if worker is not None and progress is not None:
            _end(worker, progress)


def _end(worker: subprocess.Popen[bytes], progress: mmap.mmap) -> None:
    worker.kill()
    worker.wait()
    for stream in (worker.stdin, worker.stdout, worker.stderr):
        if stream is not None:
            stream.close()
    progress.close()


def _last_words(worker: subprocess.Popen[bytes]) -> str:
    """The end of what an ended worker wrote on stderr (its traceback), for the log."""
    if worker.stderr is None:
        return ""
    os.set_blocking(worker.stderr.fileno(), False)
    try:
        said = worker.stderr.read(1 << 16) or b""
    except OSError:
        return ""
    return said.decode(errors="replace")[-2000:]


def _interpreter() -> str:
    """This process's own interpreter: /proc/self/exe where there is one (the kernel opens it directly,
    so a path the process may not walk, such as a venv's link into another user's home, does not stop
    it), else sys.executable."""
    return "/proc/self/exe" if os.path.exists("/proc/self/exe") else sys.executable


def _import_path() -> list[str]:
    """Where this process imports from: its sys.path (the interpreter run as /proc/self/exe finds no venv
    of its own), the package's own root first (an editable install's finder is not on sys.path)."""
    root = str(Path(__file__).resolve().parents[3])
    return [root, *(p for p in sys.path if p and p != root)]


def _decode(outcome: Any) -> device_cel.Outcome:
    if isinstance(outcome, bool):
        return outcome
    message = str(outcome.get("error", "CEL worker: no answer")) if isinstance(outcome, dict) else str(outcome)
    if isinstance(outcome, dict) and outcome.get("value"):
        return ValueError(message)
    return device_cel.SelectorError(message, unreadable=bool(isinstance(outcome, dict) and outcome.get("unreadable")))


def _cpu_seconds(pid: int) -> float:
    """User and system CPU the process has used (/proc/PID/stat utime and stime, fields 14 and 15)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return 0.0

"""The process that evaluates tenants' CEL device selectors for the controller (cel_sandbox.py).

It reads batches as JSON lines on stdin, `[batch, [expression, ...], [[at, [driver, attributes,
capacity]], ...]]` (each pair's expression by its place in the table, its text sent once), and answers
it in pieces, each a JSON line `[outcomes, cpu seconds they used, last]` (a piece at least every
PIECE_SECONDS while it evaluates, `last` true on the batch's final one), the outcomes in order: `true`,
`false`, or `{"error": message, "unreadable": bool, "value": bool}`. A worker stopped midway loses
nothing it answered: each true or false is also written, as a byte, into the memory it shares with the
controller (OUTCOMES, at the pair's index), and an error is handed over at once with what came before.
Before each evaluation it writes `(batch, index)` into that memory (a memfd), so the controller knows
which pair is running when it stops it. Its memory is capped (RLIMIT_AS): an
expression that builds a huge value fails here, with a MemoryError, not in the controller.

    python -m webhook.controller.observe.cel_worker PROGRESS_FD
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import mmap
import resource
import signal
import struct
import sys
import time
from typing import Any

PROGRESS = struct.Struct("<qq")  # (batch, index of the pair being evaluated)
MAX_BATCH_PAIRS = 1024  # pairs sent at once: a line of at most a few MiB
SHARED_BYTES = PROGRESS.size + MAX_BATCH_PAIRS  # the progress, then a byte per pair: OUTCOMES
OUTCOMES = {True: 1, False: 2}  # a pair's byte once answered (0: not answered, or an error)
# bytes of address space: a worker takes about 90 MiB of it started (its imports, cel-cpp's too), and two
# may run at once (one and its spare, cel_sandbox.py) beside the controller, all within the chart's 768Mi
MEMORY_LIMIT = 192 << 20
PIECE_SECONDS = 0.05  # of wall time between pieces: a stop loses at most this much of what was answered


def encode(outcome: object) -> Any:
    if isinstance(outcome, bool):
        return outcome
    unreadable = bool(getattr(outcome, "unreadable", False))
    # a ValueError is an attribute of no known type: the controller names the device (devices.Memo)
    return {"error": str(outcome)[:500], "unreadable": unreadable, "value": isinstance(outcome, ValueError)}


def main(argv: list[str]) -> int:
    from webhook.controller.decide import device_cel  # after the limit's set: celpy's import is the big one

    progress = mmap.mmap(int(argv[1]), SHARED_BYTES)
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        batch, table, pairs = json.loads(line)
        outcomes: list[Any] = []
        started, sent_at = time.process_time(), time.monotonic()
        for index, (at, facts) in enumerate(pairs):
            expression = table[at]
            PROGRESS.pack_into(progress, 0, batch, index)
            try:
                shared = len(facts) > 3 and facts[3] is True
                outcome: object = device_cel.evaluate(str(expression), (str(facts[0]), facts[1], facts[2], shared))
            except MemoryError:
                outcome = device_cel.SelectorError(f"CEL {expression[:200]!r} ran out of memory")
            except RecursionError:
                outcome = device_cel.SelectorError(f"CEL {expression[:200]!r} nests too deep")
            outcomes.append(encode(outcome))
            if isinstance(outcome, bool):
                progress[PROGRESS.size + index] = OUTCOMES[outcome]
            elif index + 1 < len(pairs) or time.monotonic() - sent_at >= PIECE_SECONDS:
                started, sent_at = _hand_over(out, outcomes, started, last=False), time.monotonic()
                outcomes = []
        PROGRESS.pack_into(progress, 0, batch, len(pairs))
        _hand_over(out, outcomes, started, last=True)
    return 0


def _hand_over(out: Any, outcomes: list[Any], started: float, last: bool) -> float:
    """One piece of a batch's outcomes, with the CPU they used: what the controller charges the selectors'
    namespace (cel_budget.py), this process's start (its imports) not included. When it was written."""
    now = time.process_time()
    out.write(json.dumps([outcomes, now - started, last]).encode() + b"\n")
    out.flush()
    return now


def _die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): a worker deep in an evaluation when the controller ends goes too."""
    # not Linux: the closed stdin ends it after the evaluation
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


if __name__ == "__main__":
    _die_with_parent()
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    raise SystemExit(main(sys.argv))

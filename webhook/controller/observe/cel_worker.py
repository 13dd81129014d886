"""The process that evaluates tenants' CEL device selectors for the controller (cel_sandbox.py).

It reads batches as JSON lines on stdin, `[batch, [expression, ...], [[at, [driver, attributes,
capacity]], ...]]` (each pair's expression by its place in the table, its text sent once), and answers
each with one JSON line, `[outcomes, cpu seconds the batch used]`, the outcomes in order:
`true`, `false`, or `{"error": message, "unreadable": bool, "value": bool}`. Before each evaluation it
writes `(batch, index)` into the progress memory it shares with the controller (a memfd), so the
controller knows which pair is running when it stops it. Its memory is capped (RLIMIT_AS): an
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
# bytes of address space: a worker takes about 90 MiB of it started (its imports, cel-cpp's too), and two
# may run at once (one and its spare, cel_sandbox.py) beside the controller, all within the chart's 768Mi
MEMORY_LIMIT = 192 << 20


def encode(outcome: object) -> Any:
    if isinstance(outcome, bool):
        return outcome
    unreadable = bool(getattr(outcome, "unreadable", False))
    # a ValueError is an attribute of no known type: the controller names the device (devices.Memo)
    return {"error": str(outcome)[:500], "unreadable": unreadable, "value": isinstance(outcome, ValueError)}


def main(argv: list[str]) -> int:
    from webhook.controller.decide import device_cel  # after the limit's set: celpy's import is the big one

    progress = mmap.mmap(int(argv[1]), PROGRESS.size)
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        batch, table, pairs = json.loads(line)
        outcomes, started = [], time.process_time()
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
        PROGRESS.pack_into(progress, 0, batch, len(pairs))
        # with the CPU the batch used: what the controller charges the selectors' namespace (cel_budget.py),
        # this process's start (its imports) not included
        out.write(json.dumps([outcomes, time.process_time() - started]).encode() + b"\n")
        out.flush()
    return 0


def _die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): a worker deep in an evaluation when the controller ends goes too."""
    # not Linux: the closed stdin ends it after the evaluation
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


if __name__ == "__main__":
    _die_with_parent()
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    raise SystemExit(main(sys.argv))

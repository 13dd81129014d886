"""The bundled controller: group objects for every backend, and gang release for the gate backend.

Four rooms, each importing only the rooms below it (pyproject.toml's import contracts):

- run/: the process and its loop: the reconcile pass, the release cycle, leader election, the work
  queue, the clock, garbage collection, `explain`;
- act/: every write to the API server: releases, requeues, preemption's evictions, group objects, the
  Gang objects, events, placeholders, wake-ups, uninstall;
- observe/: what the cluster says: informers, the cluster index, the pass's snapshot, the workload a
  gang's stamp names, whether an autoscaler is there; reads only;
- decide/: the rules: the pod view and a gang's situation, placement, the queue, preemption's choice,
  head of line, deadlines; pure, no I/O.

metrics.py and interning.py are shared by the rooms above decide (interning by decide too)."""

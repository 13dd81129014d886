"""The process: `gangkeeper controller` (process), the reconcile pass that wires the rooms
(reconciler), the release cycle of gate gangs (cycle), leader election, the per-gang work queue,
the steady clock, Python's garbage collector kept off the passes, and `gangkeeper explain`."""

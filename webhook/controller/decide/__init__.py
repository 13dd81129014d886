"""The rules, pure: a pod's view and a gang's situation (state), where a gang fits (placement, shapes),
who goes first (queue, headofline), which gang to preempt (preemption), and when a gang falls due
(deadlines). Nothing here reads or writes the API server, logs a metric or keeps a clock: every input
is a value, so each rule is tested on its own and the simulator runs the same code."""

"""Prometheus metrics of the controller."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

GANGS = Gauge("gangkeeper_gangs", "Gangs by state", ["state"])
GATED_PODS = Gauge("gangkeeper_gated_pods", "Pods waiting behind gangkeeper's scheduling gate")
RELEASE_LATENCY = Histogram(
    "gangkeeper_release_latency_seconds",
    "From the last member's creation to its gang's gates being lifted",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
TIMEOUTS = Counter("gangkeeper_gang_timeouts", "Released gangs not fully scheduled within their timeout")
EVICTIONS = Counter("gangkeeper_evicted_pods", "Pods evicted so their owners recreate them gated")
PREEMPTIONS = Counter(
    "gangkeeper_preemption_victims", "Lower-priority gangs and lone pods preempted whole for a waiting gate gang"
)
API_ERRORS = Counter("gangkeeper_api_errors", "Kubernetes API calls that failed", ["verb", "code"])
PLACEHOLDERS = Counter(
    "gangkeeper_placeholder_pods",
    "Placeholder pods made for gangs that wait on an autoscaler's capacity, and deleted",
    ["action"],
)
PLACEHOLDERS_NOW = Gauge(
    "gangkeeper_placeholder_pods_now",
    "Placeholder pods in the cluster (at most the controller's maxPlaceholderPods)",
)
PROVISIONING_REQUESTS = Counter(
    "gangkeeper_provisioning_requests",
    "ProvisioningRequests made for gangs that wait on Cluster Autoscaler's capacity, and deleted",
    ["action"],
)
GROUP_OBJECTS = Counter("gangkeeper_group_object_writes", "Group objects created, updated or deleted", ["action"])
POD_WAKES = Counter(
    "gangkeeper_pod_wakes", "Waiting coscheduling pods annotated so a scheduler that lost them queues them again"
)
REPAIRS = Counter(
    "gangkeeper_replaced_pods", "Released pods replaced because their node was taken or the scheduler refused it"
)
PASS_SECONDS = Histogram(
    "gangkeeper_controller_pass_seconds",
    "Duration of one reconciliation pass",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2.5, 5, 10),
)
PASS_FAILURES = Counter("gangkeeper_controller_pass_failures", "Reconciliation passes that raised")
LEADER = Gauge("gangkeeper_controller_leader", "1 while this replica holds the Lease and may write")
LEASE_LOST = Counter("gangkeeper_controller_lease_lost", "Times this replica lost the Lease while leading")
GANG_WRITES = Counter(
    "gangkeeper_gang_object_writes", "Gang objects created, patched (spec, status) or deleted", ["action"]
)
GANG_FAILURES = Counter(
    "gangkeeper_gang_failures", "Gangs whose reconciliation raised; each is retried alone with backoff"
)
CLOCK_JUMPS = Counter("gangkeeper_clock_jumps", "Forward jumps of the wall clock not counted against any timeout")
GC_PAUSES = Histogram(
    "gangkeeper_controller_gc_pause_seconds",
    "Python's cyclic garbage collections, by generation: a full one walks every cached pod",
    ["generation"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
# what tenants' objects cost the controller (devices.Memo, cel_sandbox.CelSandbox): read when scraped
CEL_EVALUATIONS = Gauge(
    "gangkeeper_cel_evaluations", "Device selector evaluations made since start (results are remembered)"
)
CEL_OVER_BUDGET = Gauge(
    "gangkeeper_cel_over_budget_expressions",
    "Device selectors that ran over their CPU budget, never evaluated again while unchanged",
)
CEL_DEFERRED = Gauge(
    "gangkeeper_cel_deferred_evaluations", "Device selector evaluations left to a later pass for a pass's budget"
)
CEL_NAMESPACES_DEFERRED = Gauge(
    "gangkeeper_cel_namespaces_deferred",
    "Namespaces whose device selectors wait for later passes, past their share of a pass's CEL budget",
)
CEL_SECONDS = Gauge(
    "gangkeeper_cel_pass_seconds", "Seconds of device selector evaluation charged to tenants in the current pass"
)
CACHE_ENTRIES = Gauge("gangkeeper_cache_entries", "Entries of the controller's bounded caches", ["cache"])
CACHE_EVICTIONS = Gauge(
    "gangkeeper_cache_evictions", "Entries evicted from a bounded cache, least recently used first", ["cache"]
)
GROUPS = Gauge(
    "gangkeeper_gang_groups",
    "Groups of gangs that are useful only whole (a KubeRay multi-host replica), by mechanism and state: "
    "waiting (none bound), running (all bound), partly_bound (some bound, which the gate never does)",
    ["mechanism", "state"],
)
PARTLY_HELD = Gauge(
    "gangkeeper_partly_running_requests",
    "What the bound members of gangs partly running hold now (fewer than their minimum bound), by mechanism",
    ["mechanism", "resource"],
)
PARTLY_HELD_SECONDS = Counter(
    "gangkeeper_partly_running_resource_seconds",
    "What gangs partly running held, integrated over time (GPU-seconds for nvidia.com/gpu), by mechanism",
    ["mechanism", "resource"],
)

"""Names of gangkeeper's public contract (design.md, "Names"). Keep them stable."""

from typing import Final

PREFIX: Final = "gangkeeper.io"

NAMESPACE_ENABLED_LABEL: Final = f"{PREFIX}/enabled"
NAMESPACE_BACKEND_LABEL: Final = f"{PREFIX}/backend"
# "false" on a namespace: its gang pods are not marked karpenter.sh/do-not-disrupt (protectFromDisruption)
NAMESPACE_PROTECT_LABEL: Final = f"{PREFIX}/protect-from-disruption"
# the schedulerName a namespace's gangs get (Volcano or coscheduling), when not the cluster's default:
# scheduler-plugins' production install runs Coscheduling inside default-scheduler itself
NAMESPACE_SCHEDULER_ANNOTATION: Final = f"{PREFIX}/scheduler-name"
# the Volcano queues a namespace's gangs may name (comma-separated), set by whoever owns the namespace:
# without it any queue is allowed
NAMESPACE_QUEUES_ANNOTATION: Final = f"{PREFIX}/volcano-queues"
SKIP_LABEL: Final = f"{PREFIX}/skip"
DEPLOYMENT_GANG_ANNOTATION: Final = f"{PREFIX}/gang"
GROUP_NAME_LABEL: Final = f"{PREFIX}/group-name"
GROUP_SIZE_ANNOTATION: Final = f"{PREFIX}/group-size"
MIN_MEMBER_ANNOTATION: Final = f"{PREFIX}/min-member"
QUEUE_ANNOTATION: Final = f"{PREFIX}/queue"
TIMEOUT_ANNOTATION: Final = f"{PREFIX}/timeout-seconds"
# how long a gang that ran whole may run short of minMember (a member lost) before it is requeued whole
RECOVERY_ANNOTATION: Final = f"{PREFIX}/recovery-timeout-seconds"
GROUP_LABEL: Final = f"{PREFIX}/group"
# how long a workload runs once started: lets the queue plan when capacity returns (backfill)
EXPECTED_SECONDS_ANNOTATION: Final = f"{PREFIX}/expected-seconds"
# `pack` or `spread`: how the gate controller places a gang's pods (serving kinds spread by default)
PLACEMENT_ANNOTATION: Final = f"{PREFIX}/placement"
# a node label key all of a gang's pods must share a value of (one rack, one zone), or should as far as
# capacity allows (webhook/gangs/topology.py reads these and Kueue's and KAI's equivalents)
TOPOLOGY_REQUIRED_ANNOTATION: Final = f"{PREFIX}/topology-required"
TOPOLOGY_PREFERRED_ANNOTATION: Final = f"{PREFIX}/topology-preferred"
# the same, one level up, shared by all the gangs of one workload (a LeaderWorkerSet's groups, a JobSet's
# jobs started in order): e.g. every group in one block while each group keeps to a rack
WORKLOAD_TOPOLOGY_REQUIRED_ANNOTATION: Final = f"{PREFIX}/workload-topology-required"
WORKLOAD_TOPOLOGY_PREFERRED_ANNOTATION: Final = f"{PREFIX}/workload-topology-preferred"
GATE: Final = f"{PREFIX}/gang-gate"
# who made a workload's member pod, as the mutating webhook saw the review's user at its creation:
# "controller" (a system identity, or a service account of another namespace: the workload's controller or
# an operator) or "tenant" (anyone else: a user, or an account of the pod's own namespace). Written only by
# the webhook at CREATE, never changed after (admission refuses it): supervision takes only a pod made by a
# controller as a member that started (act/supervise.py)
MADE_BY_ANNOTATION: Final = f"{PREFIX}/made-by"
MADE_BY_CONTROLLER: Final = "controller"
MADE_BY_TENANT: Final = "tenant"
# a placeholder pod the gate controller makes for a gang that waits on capacity on an autoscaled cluster
# (an autoscaler adds nodes only for Unschedulable pods, never for gated ones): the gang it stands for
PLACEHOLDER_LABEL: Final = f"{PREFIX}/placeholder-for"
GANG_API_VERSION: Final = f"{PREFIX}/v1alpha1"  # the Gang objects (charts/gangkeeper/templates/crd.yaml)
GANG_KIND: Final = "Gang"
# their PriorityClass (the chart's): below every workload's, never preempting (preemptionPolicy Never),
# and not below Cluster Autoscaler's expendable cutoff (-10), under which it would not scale up for them
PLACEHOLDER_PRIORITY_CLASS: Final = "gangkeeper-placeholder"
PLACEHOLDER_PRIORITY: Final = -10  # its value: any pod above it that may preempt takes a placeholder's room

# Stamped next to GROUP_LABEL so the controller can find the workload without an owner walk.
WORKLOAD_ANNOTATION: Final = f"{PREFIX}/workload"
# The uid of that workload, written on the pod template of an object its operator made for it (a JobSet's
# Job, an MPIJob's launcher) from that object's controller ownerReference: its pods' own owner is not the
# workload, and a workload deleted and made again under its name has the same name but another uid
WORKLOAD_UID_ANNOTATION: Final = f"{PREFIX}/workload-uid"
SIZE_ANNOTATION: Final = f"{PREFIX}/gang-size"
# On a Volcano PodGroup the webhook made at its workload's admission, before the workload was stored (so
# without an owner): the controller adopts it for the workload, and does not take it for an orphan meanwhile
AWAITING_OWNER_ANNOTATION: Final = f"{PREFIX}/awaiting-owner"
# Such a PodGroup is made held: its minMember no gang can reach (gang sizes stop at maxGangPods, at most
# 100,000), so Volcano admits its pods but starts none of them until the controller, reading the workload
# itself from the API server, adopts it and writes the gang's own spec. The review that made it is not
# trusted: the webhook cannot tell the API server's reviews from a forged one (docs/security.md).
HELD_MIN_MEMBER: Final = 1_000_000
# ... and it is an orphan once this old without an owner: its workload was never stored (a later webhook
# or quota refused it), or was stored too long after it to be the workload it was made for
AWAITING_OWNER_GRACE_SECONDS: Final = 120.0

SYSTEM_NAMESPACE: Final = "gangkeeper-system"
IGNORED_NAMESPACES: Final = frozenset({"kube-system", SYSTEM_NAMESPACE})

# Membership markers of the gang mechanisms (design.md, "Verified facts").
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
VOLCANO_QUEUE_NAMESPACE_ANNOTATION: Final = "scheduling.volcano.sh/queue-name"
COSCHEDULING_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
KAI_GROUP_KEYS: Final = ("pod-group-name",)
# the controllerName of a Kueue AdmissionCheck gangkeeper's controller answers: Ready once the gang of a
# Workload that reserved quota fits the nodes whole (Kueue then admits it; MultiKueue picks that worker)
KUEUE_CHECK_CONTROLLER: Final = f"{PREFIX}/gang-fits"

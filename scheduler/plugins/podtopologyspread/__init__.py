"""PodTopologySpread: spread matching pods evenly over topology domains
(upstream pkg/scheduler/framework/plugins/podtopologyspread: common.go,
filtering.go, scoring.go, plugin.go, v1.37).

Filter (`whenUnsatisfiable: DoNotSchedule`): per constraint, the pods matching
its selector *in the incoming pod's namespace* (terminating pods excluded) are
counted per domain of `topologyKey`, over the eligible nodes only: nodes that
carry every constraint's key, pass the pod's nodeSelector / required node
affinity when `nodeAffinityPolicy: Honor` (the default) and whose
NoSchedule/NoExecute taints the pod tolerates when `nodeTaintsPolicy: Honor`
(default Ignore). A node is feasible when
`count(its domain) + selfMatch - globalMin <= maxSkew`, where globalMin is 0
while fewer eligible domains exist than `minDomains` (default 1). A node
without a key is rejected as unresolvable ("... (missing required label)");
for each node the first failing constraint, in spec order, names the reason.

Score (`ScheduleAnyway`): upstream's preScore/score/normalize: per constraint
`count * log(#domains among the scored nodes + 2) + (maxSkew - 1)` (hostname
constraints count per node and weigh by the number of scored nodes), rounded,
then reversed so the node with the fewest matching pods gets 100. Scored nodes
that lack a key get 0 (upstream's IgnoredNodes), except under System
defaulting, where a missing key is the value "" (nodes without a zone form a
zone of their own, as upstream).

`matchLabelKeys`: the incoming pod's values for those keys are ANDed into the
selector, as upstream's scheduler does. The apiserver may already have merged
them into `labelSelector` (MatchLabelKeysInPodTopologySpreadSelectorMerge);
the merge is idempotent (requirements are a deduplicated AND), so merging
twice changes nothing. A missing (null) selector matches nothing and stays so.

Upstream quirks kept on purpose: an empty selector (`{}`) counts no existing
pod but does match the incoming pod (labels.Everything().Empty()); a node's
own domain count is read even when the node itself is not eligible.

What differs from upstream, and why:

- Default constraints (args `defaultConstraints`, `defaultingType: System |
  List`, default System) apply only to pods without constraints of their own,
  as upstream, but their selector is NOT derived from the Services,
  ReplicationControllers, ReplicaSets and StatefulSets selecting the pod:
  troupe does not watch those objects. The selector is the pod's PodGroup
  instead, `scheduling.troupe.dev/pod-group=<group>` (same namespace), and a
  pod in no group gets no default constraints (upstream: a pod no controller
  selects gets none either). System defaults are upstream's: hostname maxSkew
  3 and topology.kubernetes.io/zone maxSkew 5, both ScheduleAnyway.
- Pods placed earlier in the same group cycle (`snapshot.assumed`) count like
  running pods, which is how a gang spreads within one cycle.
- No PreFilter/AddPod/RemovePod: counts are computed in Filter from the
  snapshot's per-row match counts (`snapshot.count_matching`), which the
  cycle keeps current on assume and on `remove_pod`. Preemption's "would it
  fit with these victims gone" therefore counts the victims as gone, as
  upstream's RemovePod does (tests/unit/test_preemption.py).
- A selector the apiserver would have rejected (it validates pod specs) is
  not re-validated here: an unknown operator simply matches nothing.
- Queueing hints are coarse: `events` (EventsToRegister) names the cluster
  events that can make a rejected pod fit, without upstream's per-event
  QueueingHintFn.

Modules: plugin.py (the plugin), counting.py (matching pods per domain and
its caches), common.py (constraints, selectors, inclusion policies), args.py.
"""

from .common import IGNORED, LABEL_HOSTNAME, LABEL_ZONE, REASON, REASON_MISSING_LABEL, merge_match_label_keys
from .plugin import PodTopologySpread

__all__ = [
    "IGNORED",
    "LABEL_HOSTNAME",
    "LABEL_ZONE",
    "REASON",
    "REASON_MISSING_LABEL",
    "PodTopologySpread",
    "merge_match_label_keys",
]

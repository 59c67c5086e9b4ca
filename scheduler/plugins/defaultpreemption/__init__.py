"""DefaultPreemption: PostFilter that evicts lower-priority pods, for a lone
pod (upstream's semantics) and for a whole gang (workload-aware).

Modules: plugin.py (the plugin and its args), victims.py (who may be evicted,
in units taken together; PodDisruptionBudget counting), search.py (choosing
victims with the scheduler's own algorithm as the test of "does it fit").
"""

from .plugin import DefaultPreemption, DefaultPreemptionArgs

__all__ = ["DefaultPreemption", "DefaultPreemptionArgs"]

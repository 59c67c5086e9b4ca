"""NodeResourcesFit and NodeResourcesBalancedAllocation (upstream
pkg/scheduler/framework/plugins/noderesources). One package, as upstream, so
the two share the resource-allocation code (resource_allocation.py) without
one plugin importing another.

- fit.py: NodeResourcesFit (Filter, and Score by `scoringStrategy`)
- balanced_allocation.py: NodeResourcesBalancedAllocation (Score)
- scoring.py: LeastAllocated, MostAllocated, RequestedToCapacityRatio
- resource_allocation.py: the requests and allocatable the scores read
- args.py: both plugins' args
"""

from .balanced_allocation import NodeResourcesBalancedAllocation
from .fit import NodeResourcesFit

__all__ = ["NodeResourcesBalancedAllocation", "NodeResourcesFit"]

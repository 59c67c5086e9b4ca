"""In-tree plugins, named as upstream names them."""

from __future__ import annotations

from ..framework.registry import Registry
from .balancedallocation import NodeResourcesBalancedAllocation
from .gangscheduling import GangScheduling
from .nodeaffinity import NodeAffinity
from .nodename import NodeName
from .nodeports import NodePorts
from .noderesources import NodeResourcesFit
from .nodeunschedulable import NodeUnschedulable
from .schedulinggates import SchedulingGates
from .tainttoleration import TaintToleration

IN_TREE = (
    SchedulingGates,
    GangScheduling,
    NodeUnschedulable,
    NodeName,
    TaintToleration,
    NodeAffinity,
    NodePorts,
    NodeResourcesFit,
    NodeResourcesBalancedAllocation,
)


def in_tree_registry() -> Registry:
    registry = Registry()
    for plugin in IN_TREE:
        registry.register(plugin)
    return registry

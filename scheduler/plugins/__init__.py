"""In-tree plugins, named as upstream names them: one module or package per
plugin (noderesources holds NodeResourcesFit and
NodeResourcesBalancedAllocation, as upstream), none importing another."""

from __future__ import annotations

from ..framework.registry import Registry
from .capacityrequest import CapacityRequest
from .defaultpreemption import DefaultPreemption
from .dynamicresources import DynamicResources
from .gangscheduling import GangScheduling
from .interpodaffinity import InterPodAffinity
from .nodeaffinity import NodeAffinity
from .nodename import NodeName
from .nodeports import NodePorts
from .noderesources import NodeResourcesBalancedAllocation, NodeResourcesFit
from .nodeunschedulable import NodeUnschedulable
from .podgrouppodscount import PodGroupPodsCount
from .podtopologyspread import PodTopologySpread
from .reservation import Reservation
from .schedulinggates import SchedulingGates
from .tainttoleration import TaintToleration
from .topologyplacement import TopologyPlacementGenerator

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
    PodTopologySpread,
    InterPodAffinity,
    DefaultPreemption,
    Reservation,
    CapacityRequest,
    DynamicResources,
    TopologyPlacementGenerator,
    PodGroupPodsCount,
)


def in_tree_registry() -> Registry:
    registry = Registry()
    for plugin in IN_TREE:
        registry.register(plugin)
    return registry

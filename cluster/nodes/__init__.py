"""Node access: one interface, a driver per way of reaching a node (SSH, local)."""

from cluster.nodes.base import CommandResult, FileBytes, NodeConnection, node_home
from cluster.nodes.connect import ClusterConnection, connect_cluster

__all__ = [
    "ClusterConnection",
    "CommandResult",
    "FileBytes",
    "NodeConnection",
    "connect_cluster",
    "node_home",
]

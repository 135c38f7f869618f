"""The machine model: CPU/node id sets, the topology tree, and its discovery."""

from nri_resmgr.topology.cpuset import CPUSet, IDSet, IDSetError, NodeSet

__all__ = ["CPUSet", "IDSet", "IDSetError", "NodeSet"]

"""Ours with one rule of theirs: the counterfactuals behind two documented classes.

Theory of operation: a `Shadow` runs our topology-aware policy in process, fed the same
containers in the same order as the daemon under test (the NRI pod and container
documents, read by the daemon's own `container_from_nri`), with one input changed the way
nri-plugins sees it (one of `VARIANTS`), so `Shadow.held` is where ours would put a container
if it saw that input as they do. A divergence whose container a shadow places exactly as
theirs does is caused by that input and nothing else. A restart ends a shadow: the
daemon's rebuild reads back what the runtime reports, which a shadow does not model, so
after one it answers None and the classes fall back to their narrow forms.

`THEIR_KINDS` (class `memory-kind-by-size`): nri-plugins names every CPU-less memory
node by its size (their sysfs ``system.go``: smaller than the average DRAM node is HBM,
else PMEM); ours asks the firmware first (NVDIMM regions, HMAT bandwidth), so on a
machine where the two disagree a node is default memory on one side and not on the
other. That changes more than the memory nodes of a container: the pool whose memory
has the kinds a container may use wins (`scoring`, "kinds missing"), so the CPUs differ
too, and every later container lands elsewhere on both sides. The shadow runs on
`their_kinds`, the machine with each such node renamed as nri-plugins names it (only
where one is).

`LIMITS_AS_REQUESTS` (class `burstable-memory-by-limit`): nri-plugins reserves a
container's memory request, or its limit when the request is unknown
(``MemAmountToAllocate``), and a Burstable container's request is unknown without the
resource-annotator annotation (or an OOM score adjustment they estimate it from), so its
limit fills the node there; ours counts only a known request, as the scheduler does.
The shadow gives every Burstable container without a known memory request its limit as
the request.

`THEIR_RESERVED` (class `reserved-capacity`): nri-plugins counts 1000m of reserved
capacity per reserved CPU (their #632), ours the quantity configured (750m is 750m), so a
kube-system container between the two runs on the reserved CPUs there and on the root
pool's shared CPUs here, and whatever it takes moves the containers after it. The shadow
rounds ``reservedResources.cpu`` up to whole CPUs, where that reserves the same CPUs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from google.protobuf import json_format

from nri_api import api
from nri_resmgr.config import load_config
from nri_resmgr.model import ContainerID, ContainerInfo, MemoryKind, QoSClass, ResmgrError
from nri_resmgr.policy.topology_aware import TopologyAwarePolicy, TopologyAwareState
from nri_resmgr.runtime.adapter import container_from_nri
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.model import Topology
from tests.differential.plugins import Held, Placement

__all__ = [
    "AS_IS",
    "LIMITS_AS_REQUESTS",
    "THEIR_KINDS",
    "THEIR_RESERVED",
    "VARIANTS",
    "Shadow",
    "applies",
    "kind_by_size",
    "their_kinds",
]

Json = dict[str, Any]


def _their_kind(node_bytes: int, average: float) -> MemoryKind:
    return MemoryKind.HBM if node_bytes < average else MemoryKind.PMEM


def kind_by_size(machine: Topology) -> IDSet:
    """The CPU-less nodes whose kind nri-plugins' size rule names otherwise than ours:
    theirs calls one HBM when smaller than the average DRAM node, else PMEM (their sysfs
    ``system.go``); ours asks the firmware first (NVDIMM regions, HMAT bandwidth)."""
    dram = [machine.node(n).memory_bytes for n in machine.node_ids(with_cpus=True)]
    average = sum(dram) / max(1, len(dram))
    out = set()
    for n in machine.node_ids(with_cpus=False):
        node = machine.node(n)
        theirs = _their_kind(node.memory_bytes, average)
        if node.kind in (MemoryKind.PMEM, MemoryKind.HBM) and node.kind is not theirs:
            out.add(n)
    return IDSet(out)


def their_kinds(machine: Topology) -> Topology | None:
    """`machine` with every node of `kind_by_size` renamed as nri-plugins names it, or
    None when there is no such node."""
    flip = kind_by_size(machine)
    if not flip:
        return None
    nodes = {
        n: dataclasses.replace(
            node, kind=MemoryKind.HBM if node.kind is MemoryKind.PMEM else MemoryKind.PMEM
        )
        if n in flip
        else node
        for n, node in machine.nodes.items()
    }
    return Topology(
        cpus=machine.cpus,
        nodes=nodes,
        netdevs=machine.netdevs,
        source=f"{machine.source} (their memory kinds)",
        pci_devices=machine.pci_devices,
    )


#: the machine as nri-plugins kinds its CPU-less nodes (`their_kinds`)
THEIR_KINDS = "their-kinds"
#: Burstable containers' memory limits counted as their requests where unknown
LIMITS_AS_REQUESTS = "limits-as-requests"
#: the reserved capacity counted as theirs, 1000m per reserved CPU
THEIR_RESERVED = "their-reserved-capacity"
VARIANTS = (THEIR_KINDS, LIMITS_AS_REQUESTS, THEIR_RESERVED)
#: ours unchanged: the reference a test holds a variant against (no class uses it)
AS_IS = "as-is"

#: what a shadow holds for a container it refused
REFUSED = "refused by ours with one rule of theirs"


def applies(variant: str, machine: Topology, config: str) -> bool:
    """Whether `variant` changes anything on `machine` with `config` (a shadow is worth
    running)."""
    if variant == THEIR_KINDS:
        return their_kinds(machine) is not None
    if variant == THEIR_RESERVED:
        return _their_reserved(machine, load_config(config).policy_config) is not None
    return True


def _milli(quantity: object) -> int | None:
    text = str(quantity).strip()
    try:
        return int(text[:-1]) if text.endswith("m") else round(float(text) * 1000)
    except ValueError:
        return None


def _their_reserved(machine: Topology, config: dict[str, Any]) -> dict[str, Any] | None:
    """`config` with ``reservedResources.cpu`` rounded up to whole CPUs, the capacity
    nri-plugins counts for the reserved CPUs (1000m each, their #632), or None when it
    is whole already, is not a quantity, or the rounding would reserve other CPUs."""
    reserved = config.get("reservedResources") or {}
    milli = _milli(reserved.get("cpu", ""))
    if milli is None or milli % 1000 == 0:
        return None
    rounded = {**config, "reservedResources": {**reserved, "cpu": f"{-(-milli // 1000)}"}}
    picked = TopologyAwarePolicy(topology=machine, config=config).config.reserved
    if TopologyAwarePolicy(topology=machine, config=rounded).config.reserved != picked:
        return None
    return rounded


def _limit_as_request(info: ContainerInfo) -> ContainerInfo:
    req = info.request
    if info.qos_class is not QoSClass.BURSTABLE or req.memory_request is not None:
        return info
    if not req.memory_limit:
        return info
    request = dataclasses.replace(req, memory_request=req.memory_limit)
    return dataclasses.replace(info, request=request)


class Shadow:
    """Our topology-aware policy with `variant` (`VARIANTS`), stepped beside the daemon."""

    def __init__(self, machine: Topology, config: str, variant: str) -> None:
        if variant not in (*VARIANTS, AS_IS):
            raise ValueError(
                f"shadow variant: expected one of {(*VARIANTS, AS_IS)}, found {variant!r}"
            )
        topology = machine
        if variant == THEIR_KINDS:
            relabelled = their_kinds(machine)
            if relabelled is None:
                raise ValueError(
                    f"machine {machine.source}: expected a CPU-less node nri-plugins kinds "
                    "otherwise by its size, found none (their_kinds is None)"
                )
            topology = relabelled
        self.variant = variant
        policy_config = load_config(config).policy_config
        if variant == THEIR_RESERVED:
            rounded = _their_reserved(machine, policy_config)
            if rounded is None:
                raise ValueError(
                    f"machine {machine.source}: expected a fractional reservedResources.cpu "
                    f"whose whole CPUs are the same, found {policy_config.get('reservedResources')}"
                )
            policy_config = rounded
        self.policy = TopologyAwarePolicy(topology=topology, config=policy_config)
        self.state: TopologyAwareState = self.policy.initial_state()
        self.refused: set[str] = set()
        self.live = True
        self._held: dict[str, Held] = {}

    def create(self, pod: Json, container: Json) -> None:
        """The daemon's CreateContainer: the policy allocates (or refuses) it."""
        if not self.live:
            return
        try:
            info = container_from_nri(
                json_format.ParseDict(pod, api.PodSandbox(), ignore_unknown_fields=True),
                json_format.ParseDict(container, api.Container(), ignore_unknown_fields=True),
            )
            if self.variant == LIMITS_AS_REQUESTS:
                info = _limit_as_request(info)
            self.state = self.policy.allocate(self.state, info).state
        except ResmgrError:
            # the daemon refuses such a container too (an allocation, annotation or
            # adapter error): the shadow holds a refusal for it
            self.refused.add(container["id"])
        self._render()

    def remove(self, cid: str) -> None:
        """The daemon's StopContainer and RemoveContainer."""
        if not self.live:
            return
        self.refused.discard(cid)
        self.state = self.policy.release(self.state, ContainerID(cid)).state
        self._render()

    def restart(self) -> None:
        """The plugins restarted: the shadow stops answering (module docstring)."""
        self.live = False
        self._held = {}

    def held(self, cid: str) -> Held | None:
        """Where the shadow holds container `cid` (REFUSED if it refused it), or
        None after a restart or for a container it never saw."""
        if not self.live:
            return None
        return REFUSED if cid in self.refused else self._held.get(cid)

    def _render(self) -> None:
        self._held = {
            str(cid): Placement(str(a.cpus), str(a.mems))
            for cid, a in self.policy.render(self.state).items()
        }

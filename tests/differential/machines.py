"""The machines and configurations a differential run compares the two plugins on.

Shipped machines: every synthetic spec in ``examples/topologies/``, every real sysfs
snapshot in ``../shared/topologies/`` (absent in a fresh clone: `shipped()` leaves them out
and says so through `missing_shipped()`), and nri-plugins' e2e machines of
`tests.parity.machines`. Random machines: `random_machine(seed)`, a spec drawn by
`gen.machine_spec`.

Configurations: topology-aware runs their Helm chart's default (`TA_CONFIG`, 750m
reserved); balloons runs their sample configurations (`BALLOONS_SAMPLES`) and, on random
machines, a configuration drawn by `gen.balloons_config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import build_topology
from tests.differential.gen import RandomDraw, machine_spec
from tests.parity import machines as parity
from tests.support.requirements import REPO, TOPOLOGIES

__all__ = [
    "BALLOONS_SAMPLES",
    "TA_CONFIG",
    "Machine",
    "missing_shipped",
    "random_machine",
    "shipped",
]

EXAMPLES = REPO / "examples" / "topologies"
SAMPLES = REPO / "tests" / "unit" / "resmgr" / "data" / "nri-plugins"

#: nri-plugins' topology-aware Helm default, as a custom resource both plugins read
TA_CONFIG = """\
apiVersion: config.nri/v1alpha1
kind: TopologyAwarePolicy
metadata:
  name: default
spec:
  pinCPU: true
  pinMemory: true
  preferIsolatedCPUs: true
  preferSharedCPUs: false
  colocatePods: false
  colocateNamespaces: false
  reservedResources:
    cpu: 750m
  log:
    klog:
      skip_headers: true
"""

#: their balloons sample configurations (their repository's sample-configs/ and Helm
#: values), kept in our test data
BALLOONS_SAMPLES = {
    "sample": SAMPLES / "balloons-config.yaml",
    "helm": SAMPLES / "helm-balloons-config.yaml",
}


@dataclass(frozen=True)
class Machine:
    """A named machine: a spec (dict), a spec file, or a sysfs snapshot archive."""

    name: str
    source: dict[str, Any] | Path

    @cached_property
    def topology(self) -> Topology:
        if isinstance(self.source, dict):
            return build_topology(self.source, source=self.name)
        return load_topology(str(self.source))

    @property
    def archive(self) -> Path | None:
        """The snapshot archive, for a real machine (its tree is the host root as is)."""
        if isinstance(self.source, Path) and self.source.name.endswith(".tar.xz"):
            return self.source
        return None


def shipped() -> list[Machine]:
    """Every shipped machine: examples, ../shared snapshots (if present), their e2e ones."""
    out = [Machine(f"examples/{p.stem}", p) for p in sorted(EXAMPLES.glob("*.yaml"))]
    if TOPOLOGIES.is_dir():
        out += [
            Machine(f"shared/{p.name.removesuffix('.tar.xz')}", p)
            for p in sorted(TOPOLOGIES.glob("*.tar.xz"))
        ]
    out += [
        Machine(f"parity/{name.lower()}", dict(getattr(parity, name)))
        for name in ("N4C16", "N4C128", "N6_HBM_CXL", "S8C4K")
    ]
    return out


def missing_shipped() -> str | None:
    """Why some shipped machines are left out here, or None."""
    if TOPOLOGIES.is_dir():
        return None
    return f"{TOPOLOGIES} is absent (the real machine snapshots live in ../shared)"


def random_machine(seed: int) -> Machine:
    """The random synthetic machine of `seed`."""
    return Machine(f"random/{seed}", machine_spec(RandomDraw(seed)))

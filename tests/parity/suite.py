"""Their ``create``/``delete`` as simulator steps, and ``verify`` after any of them.

`Suite` builds a scenario step by step the way their topology-aware test scripts drive a
VM (pod names ``pod0``, ``pod1``, ... and containers ``pod0c0``, ... from the templates
``guaranteed``, ``burstable`` and ``besteffort`` with their defaults), and `Suite.verify`
runs the scenario so far and evaluates their expressions over the sets after the last
step (`tests.parity.ports.check`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from nri_resmgr.simulator.results import SimulationResult
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import load_scenario
from nri_resmgr.topology.load import load_topology
from tests.parity.machines import helm_config
from tests.parity.ports import Differs, check, refused
from tests.parity.verify import Allowed, allowed

__all__ = ["Suite", "Template", "helm_launch"]

Template = Literal["guaranteed", "burstable", "besteffort"]


class Suite:
    """A scenario built step by step the way their test scripts drive a VM.

    `create` mirrors their ``[VAR=VALUE] create TEMPLATE``: keyword names are their template
    variables with their defaults (``CPU=1 MEM=100M CPUREQ=1 CPULIM=2 MEMREQ=100M
    MEMLIM=200M CONTCOUNT=1``); ``CPULIM``/``MEMLIM`` of ``""`` or ``"0"`` leave the limit
    out, as their burstable template does.  `verify` runs the scenario so far through
    `run_scenario` and returns the sets after the last step.
    """

    def __init__(
        self,
        machine: Mapping[str, Any] | str,
        config: Mapping[str, Any],
        *,
        policy: str = "topology-aware",
        consts: Mapping[str, object] | None = None,
    ) -> None:
        """`machine`: a synthetic spec, or a sysfs root directory (for kernels' odd views).

        `consts`: their machine's ``py_consts.var.py`` names, for `verify`.
        """
        self.consts = dict(consts or {})
        self.machine = machine if isinstance(machine, str) else dict(machine)
        self.config = dict(config)
        self.policy = policy
        self.topology = load_topology(self.machine)
        self.steps: list[dict[str, Any]] = []
        self.pod_count = 0
        self.live: list[str] = []

    def create(
        self,
        template: Template,
        *,
        n: int = 1,
        name: str | None = None,
        namespace: str = "default",
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        CONTCOUNT: int = 1,  # their template variables, spelt as theirs
        ICONTCOUNT: int = 0,
        CPU: str = "1",
        MEM: str = "100M",
        CPUREQ: str = "1",
        CPULIM: str = "2",
        MEMREQ: str = "100M",
        MEMLIM: str = "200M",
        MEMTYPE: str = "",
    ) -> list[str]:
        """Add ``n`` pods from a template; returns their names (``pod0``, ...)."""
        names = []
        ann = dict(annotations or {})
        if MEMTYPE:
            ann["memory-type.resource-policy.nri.io"] = MEMTYPE
        for _ in range(n):
            pod = name or f"pod{self.pod_count}"
            self.pod_count += 1
            if template == "guaranteed":
                res = {
                    "requests": {"cpu": CPU, "memory": MEM},
                    "limits": {"cpu": CPU, "memory": MEM},
                }
            elif template == "burstable":
                limits = {}
                if CPULIM not in ("", "0"):
                    limits["cpu"] = CPULIM
                if MEMLIM not in ("", "0"):
                    limits["memory"] = MEMLIM
                res = {"requests": {"cpu": CPUREQ, "memory": MEMREQ}, "limits": limits}
            else:
                res = {}
            containers = [{"name": f"{pod}c{i}", **res} for i in range(CONTCOUNT)]
            inits = [{"name": f"{pod}c{i}i", **res} for i in range(ICONTCOUNT)]
            self.steps.append(
                {
                    "create": {
                        "pod": pod,
                        "namespace": namespace,
                        "annotations": ann,
                        "labels": {"app": pod, **(labels or {})},
                        "init_containers": inits,
                        "containers": containers,
                    }
                }
            )
            names.append(pod)
            self.live.append(pod)
        return names

    def delete(self, *pods: str) -> None:
        """``kubectl delete pod PODS``."""
        self.steps.extend({"delete": {"pod": p}} for p in pods)
        self.live = [p for p in self.live if p not in pods]

    def delete_all(self) -> None:
        """``kubectl delete pods --all``."""
        self.delete(*self.live)

    def reset_counters(self) -> None:
        """Their ``reset counters``: the next pod is ``pod0`` again."""
        self.pod_count = 0

    def restart(self) -> None:
        """The policy restarts (their helm-terminate + helm-launch with pods kept)."""
        self.steps.append({"restart": {}})

    def run(self) -> SimulationResult:
        scenario = load_scenario(
            {
                "topology": self.machine,
                "policy": self.policy,
                "config": self.config,
                "steps": self.steps,
            }
        )
        return run_scenario(scenario)

    def allowed(self) -> Allowed:
        """The sets after the last step, with every step's errors (nothing checked)."""
        result = self.run()
        errors = [e for s in result.steps for e in s.errors]
        if not result.steps:
            return allowed(self.topology, {})
        return allowed(self.topology, result.steps[-1].containers, errors)

    def verify(
        self,
        *exprs: str | Differs,
        shell: Mapping[str, str] | None = None,
        refusing: Sequence[str] = (),
    ) -> Allowed:
        """Their ``verify EXPR...`` after the last step (`tests.parity.ports.check`).

        A refused container fails here, as a pod that never gets Ready fails their
        ``create``, unless it is one of `refusing` (a refusal by design, which a
        `Differs` among `exprs` then states).
        """
        v = self.allowed()
        refused([e for e in v.errors if not any(c in e for c in refusing)])
        return check(v, *exprs, shell=shell, consts=self.consts)


def helm_launch(machine: Mapping[str, Any] | str, pod_count: int = 0, **config: Any) -> Suite:
    """Their ``helm-launch topology-aware`` with ``helm-config.yaml`` and these values.

    `pod_count`: the number their next pod gets (their counter runs on across launches).
    """
    s = Suite(machine, helm_config(**config))
    s.pod_count = pod_count
    return s

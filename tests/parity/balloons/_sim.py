"""Running nri-plugins' balloons e2e tests in our simulator.

Their tests (test/e2e/policies.test-suite/balloons/ in containers/nri-plugins) are shell
scripts: launch the policy with a configuration, ``create balloons-busybox`` pods with
environment variables (CPUREQ, CPULIM, MEMREQ, MEMLIM, CONTCOUNT, namespace,
POD_ANNOTATION, POD_LABEL), then ``verify`` Python expressions over the CPUs each
container may run on.  `Script` records the same sequence as scenario steps (pods are named
``pod0``, ``pod1``, ... in creation order and their containers ``pod0c0``, ``pod0c1``, ...,
as their pod template does), `simulate` runs it, and `Placement` answers their ``cpus``,
``mems``, ``nodes``, ``cores`` and ``packages`` questions for one step.

Resources follow their framework: every ``create`` starts from its defaults (run.sh's
``yaml_in_defaults``: CPUREQ=1 CPULIM=2 MEMREQ=100M MEMLIM=200M), so `Script.create`
defaults to ``cpureq="1", cpulim="2", memreq="100M", memlim="200M"``.  A script's plain
assignment (``CPUREQ=""`` on a line of its own) holds for every later ``create`` of that
test and a prefix assignment (``CPUREQ="" create ...``) for that one only; a translation
passes the values in effect at each ``create``.  As in their template, ``""`` means unset:
requests only when CPUREQ is non-empty (memory only when MEMREQ is too), limits only when
CPUREQ and CPULIM are (memory only when MEMLIM is too).  So ``cpureq=""`` makes a best
effort container whatever the other three say (as their ``create besteffort`` template
is, which writes no resources at all).

Their machines are qemu VMs, numbered as qemu does (the two threads of a core are adjacent
ids); `tests.parity.machines` builds the same machines, so a CPU id means the same CPU in
their test and here.  As in their ``verify``, a container without a cpuset may run on
every online CPU and one without a memory set may use every memory node.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import structlog
import yaml

from nri_resmgr.simulator.results import SimulationResult, StepResult
from nri_resmgr.simulator.run import run_scenario
from nri_resmgr.simulator.scenario import Scenario, parse_cpu
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.model import Topology
from nri_resmgr.topology.synthetic import write_sysfs
from tests.parity import machines
from tests.parity.ports import Differs, check, check_metrics, metric_lines, refused
from tests.parity.verify import Allowed, allowed

#: the pod annotation that names a balloon type
BALLOON = "balloon.balloons.resource-policy.nri.io"
#: their machines (ta-suite's specs, QEMU numbering: the CPU ids their tests name)
N4C16: dict[str, Any] = machines.N4C16
N6_HBM_CXL: dict[str, Any] = machines.N6_HBM_CXL
S8C4K: dict[str, Any] = machines.S8C4K

QUIET = structlog.wrap_logger(structlog.ReturnLogger())


class Res(TypedDict, total=False):
    """Their CPUREQ, CPULIM, MEMREQ and MEMLIM, to pass as ``**res`` to `Script.create`."""

    cpureq: str
    cpulim: str
    memreq: str
    memlim: str


#: their ``CPUREQ="" MEMREQ="" CPULIM="" MEMLIM=""``: a best effort container
BESTEFFORT = Res(cpureq="", cpulim="", memreq="", memlim="")


def res(cpu: str, mem: str | None = None) -> Res:
    """CPU requests equal limits; memory too when `mem` is given (None: their defaults)."""
    out = Res(cpureq=cpu, cpulim=cpu)
    if mem is not None:
        out["memreq"] = out["memlim"] = mem
    return out


def config(text: str) -> dict[str, Any]:
    """A policy configuration from YAML (their helm ``config:`` section, as written)."""
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict), text
    return doc


@dataclass
class Script:
    """Steps in the order their test script runs them; pod names count up from pod0."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    pods: int = 0

    def create(
        self,
        *,
        contcount: int = 1,
        namespace: str = "default",
        cpureq: str = "1",
        cpulim: str = "2",
        memreq: str = "100M",
        memlim: str = "200M",
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> int:
        """``create balloons-busybox``; returns the step index.

        The resource defaults are their framework's; ``""`` leaves one unset, and as in
        their template limits are only set when requests are (CPUREQ gates both).
        """
        name = f"pod{self.pods}"
        self.pods += 1
        requests: dict[str, str] = {}
        limits: dict[str, str] = {}
        if cpureq:
            requests["cpu"] = cpureq
            if memreq:
                requests["memory"] = memreq
            if cpulim:
                limits["cpu"] = cpulim
                if memlim:
                    limits["memory"] = memlim
        containers = [
            {"name": f"{name}c{i}", "requests": requests, "limits": limits}
            for i in range(contcount)
        ]
        pod: dict[str, Any] = {
            "pod": name,
            "namespace": namespace,
            "labels": {"app": name, **(labels or {})},
            "annotations": dict(annotations or {}),
            "containers": containers,
        }
        self.steps.append({"create": pod})
        return len(self.steps) - 1

    def launched(self) -> int:
        """A step after their ``helm-launch`` with no pods: the policy restarts with the
        containers it has (none at the start), so the balloons of the launch can be read.
        Returns the step index."""
        self.steps.append({"restart": {}})
        return len(self.steps) - 1

    def delete(self, *pods: str) -> int:
        """``kubectl delete pods ...``; returns the index of the last step."""
        for pod in pods:
            self.steps.append({"delete": {"pod": pod}})
        return len(self.steps) - 1


@dataclass(frozen=True)
class Placement:
    """Where the live containers run after one step (their ``report allowed``)."""

    step: StepResult
    topology: Topology

    def _key(self, ctr: str) -> str:
        pod = ctr[: ctr.rindex("c")]
        key = f"{pod}/{ctr}"
        assert key in self.step.containers, (
            f"step {self.step.step}: expected container {key} to be live, found "
            f"{sorted(self.step.containers)}; errors {list(self.step.errors)}"
        )
        return key

    def cpus(self, ctr: str) -> IDSet:
        """The CPUs it may run on (no cpuset: every online CPU)."""
        cpus = self.step.containers[self._key(ctr)].cpus
        return IDSet.parse(cpus) if cpus else self.topology.online_cpus()

    def mems(self, ctr: str) -> IDSet:
        """The memory nodes it may use (no memory set: every node with memory)."""
        mems = self.step.containers[self._key(ctr)].mems
        if mems:
            return IDSet.parse(mems)
        return IDSet(n.id for n in self.topology.nodes.values() if n.memory_bytes)

    def nodes(self, ctr: str) -> IDSet:
        return IDSet(self.topology.cpus[c].node_id for c in self.cpus(ctr))

    def cores(self, ctr: str) -> IDSet:
        return IDSet(self.topology.cpus[c].core_id for c in self.cpus(ctr))

    def packages(self, ctr: str) -> IDSet:
        return IDSet(self.topology.cpus[c].package_id for c in self.cpus(ctr))

    def live(self, prefix: str) -> list[str]:
        """Names of live containers whose name starts with `prefix` (``pod6c``)."""
        names = [k.split("/", 1)[1] for k in self.step.containers]
        return sorted(n for n in names if n.startswith(prefix))


@dataclass(frozen=True)
class Run:
    result: SimulationResult
    topology: Topology
    #: pod name -> namespace, from the script's creates (their metrics name both)
    namespaces: Mapping[str, str] = field(default_factory=dict)
    #: ``pod/container`` -> its CPU request in milli-CPUs (their tot_req_millicpu)
    requests: Mapping[str, int] = field(default_factory=dict)
    #: their machine's ``py_consts.var.py`` names, for `verify`
    consts: Mapping[str, object] = field(default_factory=dict)
    #: the configuration's balloon types by name (their metrics' type labels)
    types: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def allowed(self, step: int) -> Allowed:
        """Their verify sets after `step` (`tests.parity.verify.allowed`), nothing checked."""
        s = self.result.steps[step]
        return allowed(self.topology, s.containers, s.errors)

    def verify(self, step: int, *exprs: str | Differs, refusing: Sequence[str] = ()) -> Allowed:
        """Their ``verify EXPR...`` after `step` (`tests.parity.ports.check`).

        A refusal at that step fails, as a pod that never gets Ready fails their
        ``create``, unless it names one of `refusing`.
        """
        v = self.allowed(step)
        refused([e for e in v.errors if not any(c in e for c in refusing)])
        return check(v, *exprs, consts=self.consts)

    def metrics(self, step: int, *, has: Sequence[str] = (), has_no: Sequence[str] = ()) -> None:
        """Their ``verify-metrics-has-line`` / ``-has-no-line`` after `step`."""
        lines = metric_lines(
            self.result.steps[step].balloons,
            self.topology,
            self.namespaces,
            self.requests,
            self.types,
        )
        check_metrics(lines, has=has, has_no=has_no)

    def at(self, step: int, *, errors: bool = False) -> Placement:
        """The placement after `step`; the step must have no errors unless `errors`."""
        s = self.result.steps[step]
        if not errors:
            assert s.errors == (), (step, s.errors)
        return Placement(s, self.topology)


def simulate(
    script: Script,
    conf: Mapping[str, Any],
    *,
    topology: Mapping[str, Any] | Topology = N4C16,
    policy: str = "balloons",
    proc_root: str | None = None,
    sysfs_root: str | None = None,
    consts: Mapping[str, object] | None = None,
) -> Run:
    """Run `script` with policy `policy` configured by `conf` on `topology`.

    `consts`: their machine's ``py_consts.var.py`` names, for `Run.verify`.

    A `Topology` (a machine a spec cannot describe, like their cache overrides) is written
    as a sysfs tree and read back by the daemon's own discovery.  With `proc_root` (a
    synthetic procfs, `nri_resmgr.control.irq.write_synthetic_proc`) interrupt affinities
    are written there and each step reports them (`StepResult.irqs`).  With `sysfs_root`
    (a tree with cpufreq/cpuidle files, `control.cpuclass.synthetic`) the CPU class files
    there are written as the daemon would.
    """
    roots = {"proc_root": proc_root, "sysfs_root": sysfs_root}
    if isinstance(topology, Topology):
        with tempfile.TemporaryDirectory(prefix="balloons-parity-") as root:
            write_sysfs(topology, root)
            run = _simulate(script, conf, root, policy, **roots)
    else:
        run = _simulate(script, conf, dict(topology), policy, **roots)
    creates = [step["create"] for step in script.steps if "create" in step]
    namespaces = {pod["pod"]: pod["namespace"] for pod in creates}
    requests = {
        f"{pod['pod']}/{c['name']}": parse_cpu(c["requests"]["cpu"], what=c["name"])
        for pod in creates
        for c in pod["containers"]
        if "cpu" in c["requests"]
    }
    types = {t["name"]: t for t in conf.get("balloonTypes", [])}
    return replace(
        run, namespaces=namespaces, requests=requests, consts=dict(consts or {}), types=types
    )


def _simulate(
    script: Script,
    conf: Mapping[str, Any],
    topology: str | dict[str, Any],
    policy: str,
    *,
    proc_root: str | None = None,
    sysfs_root: str | None = None,
) -> Run:
    policy_config = dict(conf)
    # a custom resource's control section is the daemon's (policy_documents moves it)
    control = policy_config.pop("control", None) or {}
    scenario = Scenario.model_validate(
        {
            "topology": topology,
            "policy": policy,
            "config": policy_config,
            "control": control,
            "steps": script.steps,
        }
    )
    result = run_scenario(scenario, log=QUIET, proc_root=proc_root, sysfs_root=sysfs_root)
    return Run(result, load_topology(topology))


def with_l2_per_node(topology: Topology) -> Topology:
    """`topology` with each NUMA node's CPUs sharing one L2 cache (ids = node ids).

    Their test13 and test15 override the n4c16 VM's caches so that L2 is shared by the two
    cores of a NUMA node (``"0-3", "4-7", ...`` in qemu numbering); a spec cannot say it.
    """
    cpus = {i: replace(c, l2_id=c.node_id) for i, c in topology.cpus.items()}
    return Topology(cpus=cpus, nodes=topology.nodes, netdevs=topology.netdevs,
                    source=f"{topology.source} with L2 per NUMA node")  # fmt: skip


def disjoint(*sets: IDSet) -> bool:
    """Their ``disjoint_sets``: no id in two of the sets."""
    seen: set[int] = set()
    for s in sets:
        if seen & s.ids():
            return False
        seen |= s.ids()
    return True

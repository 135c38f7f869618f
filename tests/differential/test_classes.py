"""The differential test's own parts, without Go: classes, docs, generator, host root.

* the documented difference classes here and the ``differential class `NAME``` markers in
  docs/policies.md's "Differences from nri-plugins" sections are the same set, per policy;
* each class recognises one case and refuses its near miss (`EXAMPLES`);
* the generator is deterministic per seed, its machines and configurations validate, and
  its hypothesis strategy draws the same kinds of cases;
* the host root has what nri-plugins insists on.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from nri_resmgr.policy_documents import normalize_document
from nri_resmgr.topology.synthetic import build_topology
from tests.differential.__main__ import self_agreement
from tests.differential.classes import CLASSES, Context, classify
from tests.differential.gen import Case, CreatePod, Ctr, DeletePod, Pod, Restart
from tests.differential.host import host_root
from tests.differential.machines import Machine, random_machine
from tests.differential.plugins import Placement
from tests.differential.profile import (
    POLICIES,
    case_strategy,
    make_case,
    sample_config,
    shortest_divergence,
)
from tests.differential.run import CaseResult, Observation, _Pair, _Run, _same
from tests.differential.shadow import LIMITS_AS_REQUESTS
from tests.support.requirements import REPO

DOCS = REPO / "docs" / "policies.md"
N4 = build_topology({"packages": 2, "nodes": 2, "cores": 2, "threads": 2, "numbering": "qemu"})
#: one package of 4 CPUs with a CPU-less CXL expander (node 1)
CXL = build_topology(
    {
        "packages": 1,
        "cores": 2,
        "threads": 2,
        "extra_memory_nodes": [{"kind": "cxl", "memory": "4G", "attach": 0}],
    }
)
#: a balloons configuration with a quantity reserved, and one with a groupBy type
RESERVED_750M = "reservedResources:\n  cpu: 750m\n"
GROUPBY = RESERVED_750M + "balloonTypes:\n- name: g\n  groupBy: ${pod/labels/app}\n"


#: two CPU nodes of 2G; PMEM node 2 (1G, HBM by their size rule) attached to node 0
SMALL_PMEM = build_topology(
    {
        "packages": 1,
        "nodes": 2,
        "cores": 2,
        "threads": 1,
        "memory": "2G",
        "extra_memory_nodes": [{"kind": "pmem", "memory": "1G", "attach": 0}],
    }
)
SHARED = Ctr("c0", 500, 1000, None, None)
WHOLE = Ctr("c0", 2000, 2000, 1 << 28, 1 << 28)
POD = Pod("p0", "default", "burstable", (SHARED,))


def documented() -> dict[str, set[str]]:
    """Class markers per policy, from each policy's "Differences from nri-plugins"."""
    text = DOCS.read_text()
    out: dict[str, set[str]] = {}
    for policy in POLICIES:
        section = text.split(f"## `{policy}`", 1)[1].split("\n## ", 1)[0]
        diffs = section.split("### Differences from nri-plugins", 1)[1].split("\n### ", 1)[0]
        marker = r"differential\s+class\s+`([a-z0-9-]+)`"
        out[policy] = set(re.findall(marker, diffs, re.IGNORECASE))
    return out


def test_classes_are_the_documented_ones() -> None:
    registered = {p: {c.name for c in CLASSES if c.policy == p} for p in POLICIES}
    assert registered == documented()


def ctx(**kw: object) -> Context:
    base = Context(
        machine=N4,
        policy="topology-aware",
        pod=POD,
        ctr=SHARED,
        ours=Placement("0-3", "0"),
        theirs=Placement("4-7", "1"),
        before=None,
        after_restart=False,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


_LIBMEM_REFUSAL = (
    "rpc error: code = Unknown desc = failed to allocate resources: topology-aware: "
    "failed to get offer for request <none CPU request default/p0/p0c2: shared 1399> "
    "<Memory request: limit: 0.00, req: 1.51G>: libmem: insufficient available memory: "
    "failed to resolve overcommit, zones nodes{0-1} overcommit by 532.267M"
)

#: class -> (a divergence it recognises, a near miss it does not)
EXAMPLES: dict[tuple[str, str], tuple[Context, Context]] = {
    ("topology-aware", "shared-refused"): (
        ctx(ours="no pool can fit 500m shared", theirs=Placement("0-15", "0-3")),
        ctx(ours="no pool can fit 500m shared", theirs=Placement("4-7", "1")),
    ),
    ("topology-aware", "restart-keeps-placements"): (
        ctx(
            after_restart=True,
            before=(Placement("0-3", "0"), Placement("0-3", "0")),
            ours=Placement("0-3", "0"),
            theirs=Placement("4-7", "1"),
        ),
        ctx(
            after_restart=True,
            before=(Placement("0-3", "0"), Placement("0-3", "0")),
            ours=Placement("8-11", "2"),
            theirs=Placement("4-7", "1"),
        ),
    ),
    ("topology-aware", "reserved-capacity"): (
        ctx(
            pod=replace(POD, namespace="kube-system"),
            ctr=Ctr("c0", 900, None, None, None),
            ours=Placement("1-15", "0-3"),
            theirs=Placement("0", "0"),
        ),
        ctx(
            pod=replace(POD, namespace="kube-system"),
            ctr=Ctr("c0", 1200, None, None, None),
            ours=Placement("1-15", "0-3"),
            theirs=Placement("0", "0"),
        ),
    ),
    ("topology-aware", "cxl-memory"): (
        ctx(machine=CXL, ours=Placement("1-3", "0"), theirs=Placement("1-3", "0-1")),
        ctx(machine=CXL, ours=Placement("1-3", "0"), theirs=Placement("1-2", "0-1")),
    ),
    ("topology-aware", "memory-kind-by-size"): (
        ctx(machine=SMALL_PMEM, ours=Placement("1", "0,2"), theirs=Placement("1", "0")),
        ctx(machine=SMALL_PMEM, ours=Placement("1", "0,2"), theirs=Placement("1", "1")),
    ),
    ("topology-aware", "burstable-memory-by-limit"): (
        # ours counting the limits as theirs does holds it where theirs does
        ctx(shadows={LIMITS_AS_REQUESTS: Placement("4-7", "1")}),
        ctx(shadows={LIMITS_AS_REQUESTS: Placement("0-3", "0")}),
    ),
    ("topology-aware", "burstable-memory-refused"): (
        # random/20 of the long run: theirs estimates 1.51G for it and finds no zone
        ctx(theirs=_LIBMEM_REFUSAL),
        # the same refusal of a Guaranteed container (its request is known)
        ctx(theirs=_LIBMEM_REFUSAL, pod=replace(POD, qos="guaranteed"),
            ctr=replace(SHARED, memory_request=1 << 30)),
    ),
    ("balloons", "restart-keeps-placements"): (
        ctx(
            policy="balloons",
            after_restart=True,
            before=(Placement("2", "0"), Placement("2", "0")),
            ours=Placement("2", "0"),
            theirs=Placement("3", "0"),
        ),
        ctx(
            policy="balloons",
            after_restart=False,
            before=(Placement("2", "0"), Placement("2", "0")),
            ours=Placement("2", "0"),
            theirs=Placement("3", "0"),
        ),
    ),
    ("balloons", "reserved-deflates-home"): (
        # 750m reserved on N4: the reserved balloon's home is CPU 0; theirs gave it back
        ctx(
            policy="balloons",
            config=RESERVED_750M,
            pod=replace(POD, namespace="kube-system"),
            ours=Placement("0-1", "0"),
            theirs=Placement("1-2", "0"),
        ),
        # not a kube-system container: another balloon's CPUs differ
        ctx(
            policy="balloons",
            config=RESERVED_750M,
            ours=Placement("0-1", "0"),
            theirs=Placement("1-2", "0"),
        ),
    ),
    ("balloons", "groupby-apart"): (
        ctx(
            policy="balloons",
            config=GROUPBY,
            pod=replace(POD, labels=(("app", "a"),)),
            ours=Placement("2", "0"),
            theirs=Placement("1", "0"),
            others=((replace(POD, name="p1", labels=(("app", "b"),)), Placement("1", "0"),
                     Placement("1", "0")),),
        ),
        # theirs shares the cpuset with a container of the same group: no mixing
        ctx(
            policy="balloons",
            config=GROUPBY,
            pod=replace(POD, labels=(("app", "a"),)),
            ours=Placement("2", "0"),
            theirs=Placement("1", "0"),
            others=((replace(POD, name="p1", labels=(("app", "a"),)), Placement("1", "0"),
                     Placement("1", "0")),),
        ),
    ),
    ("balloons", "memory-kind-by-size"): (
        # PMEM node 2 is HBM by their size rule: a container asking PMEM gets node 2
        # here, the balloon's DRAM node there
        ctx(
            policy="balloons",
            machine=SMALL_PMEM,
            pod=replace(POD, annotations=(("memory-type.resource-policy.nri.io/container.c0",
                                           "pmem"),)),
            ours=Placement("1", "2"),
            theirs=Placement("1", "0"),
        ),
        # the same without the annotation
        ctx(policy="balloons", machine=SMALL_PMEM, ours=Placement("1", "2"),
            theirs=Placement("1", "0")),
    ),
    ("balloons", "burstable-memory-by-limit"): (
        # as parity/s8c4k of the long run: 256Mi + 4Gi of limits (1.25Gi requested) on
        # a 4G node; theirs widened the zone (by node 1 here)
        ctx(
            policy="balloons",
            ctr=Ctr("c0", 1000, 1900, 1 << 28, 1 << 28),
            ours=Placement("0-1", "0"),
            theirs=Placement("0-1", "0-1"),
            neighbours=((Ctr("c1", 800, 1400, 1 << 30, 4 << 30), Placement("0-1", "0")),),
        ),
        # the same with the sibling's memory elsewhere here: node 0 is not overcommitted
        ctx(
            policy="balloons",
            ctr=Ctr("c0", 1000, 1900, 1 << 28, 1 << 28),
            ours=Placement("0-1", "0"),
            theirs=Placement("0-1", "0-1"),
            neighbours=((Ctr("c1", 800, 1400, 1 << 30, 4 << 30), Placement("0-1", "1")),),
        ),
    ),
    ("balloons", "maxcpus-honoured"): (
        ctx(
            policy="balloons",
            ours="no t0 balloon can take 1200m CPU: t0[0] would need 2 CPUs; maxCPUs is 1",
            theirs=Placement("4", "1"),
        ),
        ctx(policy="balloons", ours="no t0 balloon can take 1200m CPU", theirs=Placement("4", "1")),
    ),
}


def test_every_class_has_an_example() -> None:
    assert set(EXAMPLES) == {(c.policy, c.name) for c in CLASSES}


@pytest.mark.parametrize("key", sorted(EXAMPLES), ids=lambda k: f"{k[0]}-{k[1]}")
def test_class_recognises_its_case_and_not_the_near_miss(key: tuple[str, str]) -> None:
    hit, miss = EXAMPLES[key]
    assert classify(hit) == key[1]
    assert classify(miss) is None


def test_no_class_for_a_plain_divergence() -> None:
    """Different CPUs of a placed container, no restart: undocumented for both policies."""
    for policy in POLICIES:
        assert classify(ctx(policy=policy)) is None
        assert classify(ctx(policy=policy, ctr=WHOLE)) is None


class _FakeSide:
    """What `run._Run.observe` reads of a side: its runtime's placements."""

    def __init__(self) -> None:
        self.placements: dict[str, Placement] = {}


def test_classes_carry_and_knock_on_until_the_sides_converge() -> None:
    """A direct class disturbs the case (knock-on for the others, the same step too), a
    container keeps its class while it differs, and once every container is identical
    the next divergence is undocumented again."""
    ours, theirs = _FakeSide(), _FakeSide()
    machine = Machine("n4", {"packages": 2, "nodes": 2, "cores": 2, "threads": 2})
    case = Case(machine.name, "balloons", RESERVED_750M, ())
    run = _Run(case, machine, _Pair(ours, theirs, None))  # type: ignore[arg-type]
    pod = Pod("p0", "default", "guaranteed", (Ctr("a", 2000, 2000, None, None),))
    for cid in ("a", "b"):
        run.names[cid] = (f"default/p0/{cid}", pod, pod.containers[0])

    def step(**held: tuple[Placement | str, Placement]) -> dict[str, str | None]:
        for cid, (mine, their) in held.items():
            if isinstance(mine, str):
                run.refused[cid] = (mine, "")
            else:
                ours.placements[cid] = mine
            theirs.placements[cid] = their
        before = len(run.result.observations)
        run.observe("step")
        return {o.container.rsplit("/", 1)[1]: o.cls for o in run.result.observations[before:]}

    refusal = "no t0 balloon can take 2000m CPU: t0[0] would need 2 CPUs; maxCPUs is 1"
    got = step(a=(refusal, Placement("4")), b=(Placement("1"), Placement("2")))
    assert got == {"a": "maxcpus-honoured", "b": "knock-on:maxcpus-honoured"}
    # b moves on both sides and still differs: it keeps its class; a stays refused
    got = step(b=(Placement("1-2"), Placement("2-3")))
    assert got == {"a": "maxcpus-honoured", "b": "knock-on:maxcpus-honoured"}
    # a goes, b agrees: the case converges
    run.refused.pop("a")
    theirs.placements.pop("a")
    assert step(b=(Placement("5"), Placement("5"))) == {"b": None}
    # a new divergence after convergence is undocumented
    assert step(b=(Placement("6"), Placement("7"))) == {"b": ""}


def test_a_container_keeps_its_own_class_while_it_differs() -> None:
    """A restart's moved container that theirs moves again keeps the restart's class
    (carried), not a knock-on of it."""
    ours, theirs = _FakeSide(), _FakeSide()
    machine = Machine("n4", {"packages": 2, "nodes": 2, "cores": 2, "threads": 2})
    run = _Run(Case(machine.name, "balloons", RESERVED_750M, ()), machine,
               _Pair(ours, theirs, None))  # type: ignore[arg-type]
    run.names["a"] = ("default/p0/a", POD, SHARED)
    ours.placements["a"] = theirs.placements["a"] = Placement("1")
    run.observe("create")
    theirs.placements["a"] = Placement("2")
    run.restarted = True
    run.observe("restart")
    theirs.placements["a"] = Placement("3")
    run.observe("another")
    assert [o.cls for o in run.result.observations] == [
        None, "restart-keeps-placements", "restart-keeps-placements"
    ]


def test_a_restart_disturbs_its_case_while_a_container_live_at_it_lives() -> None:
    """Every container identical after a restart still leaves the sides' hidden state
    apart (theirs re-allocates, ours keeps): a later divergence is the restart's knock-on
    while a container live at the restart lives, and undocumented once none does."""
    ours, theirs = _FakeSide(), _FakeSide()
    machine = Machine("n4", {"packages": 2, "nodes": 2, "cores": 2, "threads": 2})
    run = _Run(Case(machine.name, "balloons", RESERVED_750M, ()), machine,
               _Pair(ours, theirs, None))  # type: ignore[arg-type]
    for cid in ("a", "b", "c"):
        run.names[cid] = (f"default/p0/{cid}", POD, SHARED)
    ours.placements["a"] = theirs.placements["a"] = Placement("1")
    run.restarted = True
    run.observe("restart")
    ours.placements["b"], theirs.placements["b"] = Placement("2"), Placement("3")
    run.observe("b created")
    ours.placements.pop("a"), theirs.placements.pop("a")
    ours.placements["b"] = theirs.placements["b"] = Placement("2")
    run.observe("a removed")
    ours.placements["c"], theirs.placements["c"] = Placement("4"), Placement("5")
    run.observe("c created")
    assert [o.cls for o in run.result.observations] == [
        None, None, "knock-on:restart-keeps-placements", None, None, ""
    ]


def test_self_agreement_names_the_side_that_differs_from_itself() -> None:
    m = random_machine(1)
    case = Case(m.name, "balloons", "", (), 1)

    def result(theirs: str) -> CaseResult:
        r = CaseResult(case)
        r.observations.append(Observation(0, 0, "op", "c", Placement("1"), Placement(theirs), ""))
        return r

    got = self_agreement([[(m, result("2"))], [(m, result("2"))], [(m, result("3"))]])
    assert got == [
        "balloons random/1 seed 1 ours: same on every run",
        "balloons random/1 seed 1 theirs: runs [2] differ from run 0",
    ]


def test_both_refusing_is_agreement() -> None:
    assert _same("no balloon fits", "balloon allocation failed")
    assert not _same("no balloon fits", "")
    assert not _same("no balloon fits", Placement("1"))


def test_a_seed_names_one_case() -> None:
    m = random_machine(7)
    assert make_case(m, "balloons", 3) == make_case(random_machine(7), "balloons", 3)
    assert make_case(m, "balloons", 3) != make_case(m, "balloons", 4)
    assert random_machine(8).source != m.source


@pytest.mark.parametrize("seed", range(1, 201))
def test_random_machines_and_configs_validate(seed: int) -> None:
    m = random_machine(seed)
    topo = build_topology(m.source)  # type: ignore[arg-type]
    assert len(topo.online_cpus()) >= 2
    case = make_case(m, "balloons", seed)
    normalize_document(yaml.safe_load(case.config))


@pytest.mark.parametrize("name", ["sample", "helm"])
def test_balloons_samples_load(name: str) -> None:
    normalize_document(yaml.safe_load(sample_config(name)))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(case_strategy("topology-aware"))
def test_strategy_draws_cases(mc: tuple[Machine, object]) -> None:
    m, case = mc
    ops = case.ops  # type: ignore[attr-defined]
    assert not ops or isinstance(ops[0], CreatePod)
    assert all(isinstance(op, CreatePod | DeletePod | Restart) for op in ops)
    build_topology(m.source)  # type: ignore[arg-type]


def test_the_generator_covers_what_the_issue_lists() -> None:
    """Across the CI profile's first machines: every QoS class, integer and fractional
    CPUs, limits and none, memory limits and none, init containers, deletions, restarts
    and each topology-aware annotation."""
    seen: set[str] = set()
    for seed in range(1, 40):
        for op in make_case(random_machine(seed), "topology-aware", 1).ops:
            seen.add(type(op).__name__)
            if not isinstance(op, CreatePod):
                continue
            pod = op.pod
            seen.add(pod.qos)
            seen.update(k.split(".resource-policy")[0].split("/")[-1] for k, _ in pod.annotations)
            if pod.init:
                seen.add("init")
            for c in pod.containers:
                seen.add("integer" if c.cpu_request % 1000 == 0 else "fraction")
                seen.add("cpu-limit" if c.cpu_limit is not None else "no-cpu-limit")
                seen.add("mem-limit" if c.memory_limit is not None else "no-mem-limit")
    assert seen >= {
        "CreatePod", "DeletePod", "Restart", "guaranteed", "burstable", "besteffort",
        "init", "integer", "fraction", "cpu-limit", "no-cpu-limit", "mem-limit",
        "no-mem-limit", "prefer-isolated-cpus", "prefer-shared-cpus", "hide-hyperthreads",
        "memory-type", "cpu.preserve", "affinity", "anti-affinity",
    }, seen


def test_the_balloons_generator_covers_its_options_and_machines() -> None:
    """Across the CI profile's random machines: every balloons option the configurations
    draw (groupBy included), the annotations balloons reads, and machines with several
    sockets, dies, NUMA nodes and L3 groups, SMT on and off, isolated CPUs and CPU-less
    memory nodes."""
    seen: set[str] = set()
    for seed in range(1, 51):
        m = random_machine(seed)
        spec = m.source
        assert isinstance(spec, dict)
        for key in ("packages", "dies", "nodes", "l3_per_die"):
            if spec[key] > 1:
                seen.add(key)
        seen.add("smt" if spec["threads"] > 1 else "no-smt")
        seen.update(k for k in ("isolated", "extra_memory_nodes") if k in spec)
        case = make_case(m, "balloons", 1)
        for key in (
            "minCPUs", "maxCPUs", "allocatorPriority", "preferNewBalloons",
            "shareIdleCPUsInSame", "maxBalloons", "minBalloons", "groupBy", "namespaces",
        ):
            if f"{key}:" in case.config:
                seen.add(key)
        for op in case.ops:
            if isinstance(op, CreatePod):
                seen.update(k.split(".resource-policy")[0] for k, _ in op.pod.annotations)
                seen.update(f"label-{k}" for k, _ in op.pod.labels)
    assert seen >= {
        "packages", "dies", "nodes", "l3_per_die", "smt", "no-smt", "isolated",
        "extra_memory_nodes", "minCPUs", "maxCPUs", "allocatorPriority", "preferNewBalloons",
        "shareIdleCPUsInSame", "maxBalloons", "minBalloons", "groupBy", "namespaces",
        "balloon.balloons", "hide-hyperthreads", "memory-type", "label-app",
    }, seen


def test_host_root_has_what_nri_plugins_reads(tmp_path: Path) -> None:
    root = host_root(N4, tmp_path)
    cache = root / "sys/devices/system/cpu/cpu0/cache/index0"
    assert (cache / "size").read_text().strip().endswith("K")
    assert (cache / "ways_of_associativity").exists()
    header = (root / "proc/interrupts").read_text()
    assert header.split() == [f"CPU{i}" for i in range(16)]


def test_a_divergence_shrinks_to_its_shortest_sequence() -> None:
    """A fake pair of plugins that differ on any Guaranteed container of 2 CPUs or more:
    hypothesis shrinks the first divergence it finds to one pod creation of one such
    container (on the smallest machine it reaches)."""

    def run(m: Machine, case: Case) -> CaseResult:
        result = CaseResult(case)
        for i, op in enumerate(case.ops):
            if isinstance(op, CreatePod):
                for c in op.pod.containers:
                    same = not (op.pod.qos == "guaranteed" and c.cpu_request >= 2000)
                    theirs = Placement("0-1" if same else "2-3")
                    result.observations.append(
                        Observation(i, i, str(op), c.name, Placement("0-1"), theirs,
                                    None if same else "")
                    )
        return result

    found = shortest_divergence("topology-aware", None, run, examples=200)
    assert found is not None
    _m, result = found
    assert len(result.case.ops) == 1
    op = result.case.ops[0]
    assert isinstance(op, CreatePod) and op.pod.qos == "guaranteed"
    assert [c.cpu_request for c in op.pod.containers] == [2000]
    assert not op.pod.init and not op.pod.annotations


def test_burstable_memory_refused_needs_their_memory_refusal() -> None:
    """Another refusal of theirs (no shared CPU) is not the memory class."""
    assert classify(ctx(theirs=_LIBMEM_REFUSAL)) == "burstable-memory-refused"
    bare = _LIBMEM_REFUSAL.split(": libmem")[0]  # random/13 of the long run: no reason
    assert classify(ctx(theirs=bare)) == "burstable-memory-refused"
    other = "failed to allocate resources: topology-aware: not enough shared CPUs left"
    assert classify(ctx(theirs=other)) is None
    # random/20 of the long run: a Guaranteed container refused where theirs' estimate
    # of a live Burstable pod's memory holds the zones
    guaranteed = {"pod": replace(POD, qos="guaranteed"), "ctr": replace(SHARED, memory_request=1)}
    alone = ctx(theirs=bare, **guaranteed)
    assert classify(alone) is None
    beside = replace(alone, others=((POD, Placement("1-3", "0"), Placement("1-3", "0")),))
    assert classify(beside) == "burstable-memory-refused"


def test_balloons_memory_by_limit_needs_the_limits_alone_to_overcommit() -> None:
    """Near misses of the balloons class besides the one in `EXAMPLES`: a Guaranteed pod,
    requests that overcommit the node too, other CPUs, memory nodes ours has that theirs
    lacks."""
    hit = EXAMPLES[("balloons", "burstable-memory-by-limit")][0]
    assert classify(hit) == "burstable-memory-by-limit"
    assert classify(replace(hit, pod=replace(POD, qos="guaranteed"))) is None
    heavy = ((Ctr("c1", 800, 1400, 4 << 30, 4 << 30), Placement("0-1", "0")),)
    assert classify(replace(hit, neighbours=heavy)) is None
    assert classify(replace(hit, theirs=Placement("0-2", "0-1"))) is None
    assert classify(replace(hit, theirs=Placement("0-1", "1"))) is None

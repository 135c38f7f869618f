"""n4c16/test01-basic-placement: pods to balloon types by annotation, namespace and default.

Their configuration is the suite's helm-config.yaml (four balloon types, CPUs 1-15
available, one reserved) with its ``control.cpu`` CPU classes (the daemon's section: the
simulator has no cpufreq tree here, so they only name each class's CPUs); its ``log`` and
``instrumentation`` sections are left out.
"""

from __future__ import annotations

from nri_resmgr.topology.cpuset import IDSet
from tests.parity.balloons._sim import BALLOON, BESTEFFORT, Script, config, res, simulate
from tests.parity.ports import port

CONFIG = config("""
pinCPU: true
pinMemory: true
balloonTypes:
  - name: two-cpu
    minCPUs: 2
    maxCPUs: 2
    allocatorPriority: high
    cpuClass: class2
    preferNewBalloons: true
  - name: three-cpu
    namespaces: ["three"]
    minCPUs: 3
    allocatorPriority: normal
    cpuClass: class3
    preferSpreadingPods: true
  - name: four-cpu
    minCPUs: 4
    maxCPUs: 8
    minBalloons: 1
    allocatorPriority: low
    cpuClass: class4
  - name: five-cpu
    maxCPUs: 5
    allocatorPriority: none
    preferSpreadingPods: true
    preferNewBalloons: true
    cpuClass: class5
availableResources:
  cpu: cpuset:1-15
reservedResources:
  cpu: "1"
control:
  cpu:
    classes:
      default: {minFreq: 800000, maxFreq: 2800000}
      class2: {minFreq: 900000, maxFreq: 2900000}
      class3: {minFreq: 1000000, maxFreq: 3000000}
      class4: {minFreq: 1100000, maxFreq: 3100000, energyPerformancePreference: 1}
      class5: {minFreq: 1200000, maxFreq: 3200000, energyPerformancePreference: 2}
""")

G100 = res("100m", "100M")


@port("balloons/n4c16/test01-basic-placement")
def test_basic_placement() -> None:
    s = Script()
    # their CPUREQ="" ... create: the rest still run.sh's defaults
    pod0 = s.create(namespace="kube-system", contcount=2, cpureq="")
    # from here on each block sets all four on a line of its own
    pod1 = s.create(contcount=2, annotations={BALLOON: "two-cpu"}, **G100)
    pod2 = s.create(annotations={BALLOON: "two-cpu"}, **G100)
    pod3 = s.create(
        namespace="three",
        contcount=2,
        cpureq="1500m",
        cpulim="1500m",
        memreq="100M",
        memlim="100M",
    )
    s.delete("pod0", "pod1", "pod2", "pod3")
    pod4 = s.create(
        contcount=3,
        cpureq="3",
        cpulim="3",
        memreq="",
        memlim="",
        annotations={
            BALLOON: "four-cpu",
            "hide-hyperthreads.resource-policy.nri.io/container.pod4c1": "true",
        },
    )
    s.delete("pod4")
    pod5 = s.create(
        contcount=3,
        cpureq="1250m",
        cpulim="",
        memreq="",
        memlim="",
        annotations={BALLOON: "five-cpu"},
    )
    pod6 = s.create(contcount=4, annotations={BALLOON: "five-cpu"}, **BESTEFFORT)
    pod7 = s.create(contcount=4, annotations={BALLOON: "five-cpu"}, **BESTEFFORT)
    run = simulate(s, CONFIG)

    # pod0: kube-system, on the reserved CPUs
    run.verify(pod0, 'cpus["pod0c0"] == cpus["pod0c1"]', 'len(cpus["pod0c0"]) == 1')
    # pod1: both containers of the pod in the same two-cpu balloon
    run.verify(pod1, 'cpus["pod1c0"] == cpus["pod1c1"]', 'len(cpus["pod1c0"]) == 2')
    # pod2: a new two-cpu balloon (preferNewBalloons)
    v = run.verify(
        pod2, 'len(cpus["pod2c0"]) == 2', 'disjoint_sets(cpus["pod2c0"], cpus["pod1c0"])'
    )
    # ours beside theirs: the two two-cpu balloons are class2's CPUs (control.cpu.classes)
    classes = run.result.steps[pod2].cpu_classes
    assert {f"cpu{c:02d}" for c in IDSet.parse(classes["class2"])} == v.cpus["pod1c0"] | v.cpus[
        "pod2c0"
    ]
    # pod3: 2 x 1.5 CPUs fit exactly in one three-cpu balloon, spreading or not
    run.verify(pod3, 'cpus["pod3c0"] == cpus["pod3c1"]', 'len(cpus["pod3c0"]) == 3')
    # pod4: two containers in four-cpu[0] (inflated to 6), the third in a new instance;
    # pod4c1 hides hyperthreads
    run.verify(
        pod4,
        'cpus["pod4c1"].issubset(cpus["pod4c0"])',
        'disjoint_sets(cpus["pod4c2"], cpus["pod4c0"])',
        'len(cpus["pod4c0"]) == 6',
        'len(cpus["pod4c1"]) == 3',
        'len(cpus["pod4c2"]) == 4',
    )
    # pod5: spread containers, each in its own five-cpu balloon
    run.verify(
        pod5,
        'disjoint_sets(cpus["pod5c0"], cpus["pod5c1"], cpus["pod5c2"])',
        'len(cpus["pod5c0"]) == 2',
        'len(cpus["pod5c1"]) == 2',
        'len(cpus["pod5c2"]) == 2',
    )
    # pod6: best-effort containers each get a new balloon of one CPU
    run.verify(
        pod6,
        'set([len(cpus[ctr]) for ctr in cpus if ctr.startswith("pod6c")]) == {1}',
        'disjoint_sets(*[cpus[ctr] for ctr in cpus if ctr.startswith("pod6c")])',
        "disjoint_sets(\n"
        '          set.union(*[cpus[ctr] for ctr in cpus if ctr.startswith("pod6c")]),\n'
        '          set.union(*[cpus[ctr] for ctr in cpus if ctr.startswith("pod5c")]))',
    )
    # pod7: no room for new balloons: spread evenly over pod6's balloons (1000m free),
    # not pod5's (750m free)
    run.verify(
        pod7,
        'set([len(cpus[ctr]) for ctr in cpus if ctr.startswith("pod7c")]) == {1}',
        'disjoint_sets(cpus["pod7c0"], cpus["pod7c1"], cpus["pod7c2"], cpus["pod7c3"])',
        "max([len(cpuset) for pod, cpuset in cpus.items()]) == 2",
        "disjoint_sets(\n"
        '          set.union(*[cpus[ctr] for ctr in cpus if ctr.startswith("pod7c")]),\n'
        '          set.union(*[cpus[ctr] for ctr in cpus if ctr.startswith("pod5c")]))',
    )

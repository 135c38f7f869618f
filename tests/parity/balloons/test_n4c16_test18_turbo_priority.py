"""Their balloons n4c16/test18-turbo-priority: CPU classes compete for turbo by ``turboPriority``.

Their platform override (``cpus 0-15: min 800000, base 2900000, max 3800000`` kHz) is the
synthetic cpufreq tree here, and their checks of the logged frequency writes are checks
of the ``scaling_min_freq``/``scaling_max_freq`` files after each step (each on a fresh
tree after the steps up to it).  "No new writes" (a second container in the same
balloon, a partial deflate) is "no file changed" here; that only differing files are
ever written is the planner's property test (`tests/unit/resmgr/cpuclass/test_plan.py`).

The reserved CPU is 10, as theirs: ``reservedResources`` is a quantity, so the CPU tree
allocator packs the reserved balloon into package 1, which has fewer available CPUs, and
the turbo balloons land next to it there.  Not here: the initial writes before any pod
(the simulator commits at the first event; the daemon test covers the idle classes at
start) and the live CR patches (each configuration runs on its own).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from typing import Any

from nri_resmgr.control.cpuclass.synthetic import CPUFreqLayout, write_cpu_class_tree
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.synthetic import write_sysfs
from tests.parity.balloons._sim import BALLOON, N4C16, Run, Script, config, simulate
from tests.parity.ports import port

CONFIG = config("""
allocatorTopologyBalancing: false
availableResources:
  cpu: cpuset:2-7,10-13
reservedResources:
  cpu: 750m
pinCPU: true
idleCPUClass: default-noturbo
balloonTypes:
- name: reserved
  cpuClass: default-turbo
- name: turbo-high-bln
  cpuClass: turbo-high
  minCPUs: 1
  maxCPUs: 2
- name: turbo-low-bln
  cpuClass: turbo-low
  minCPUs: 1
  maxCPUs: 2
cpuClasses:
- name: turbo-high
  minFreq: "turbo"
  maxFreq: "turbo"
  turboPriority: 10
- name: turbo-low
  minFreq: "turbo"
  maxFreq: "turbo"
  turboPriority: 1
- name: default-turbo
  minFreq: "min"
  maxFreq: "turbo"
- name: default-noturbo
  minFreq: "min"
  maxFreq: "base"
""")
OLD_SYNTAX = config("""
allocatorTopologyBalancing: false
availableResources:
  cpu: cpuset:2-7,10-13
reservedResources:
  cpu: 750m
pinCPU: true
idleCPUClass: legacy-idle
balloonTypes:
- name: legacy-bln
  cpuClass: legacy-fast
  minCPUs: 1
  maxCPUs: 1
control:
  cpu:
    classes:
      legacy-idle:
        minFreq: 800000
        maxFreq: 2900000
      legacy-fast:
        minFreq: 3800000
        maxFreq: 3800000
""")
DEFAULT_CLASS = config("""
allocatorTopologyBalancing: false
availableResources:
  cpu: cpuset:2-7,10-13
reservedResources:
  cpu: 750m
pinCPU: true
balloonTypes:
- name: reserved
- name: fast-bln
  cpuClass: fast
  minCPUs: 1
  maxCPUs: 1
cpuClasses:
- name: default
  minFreq: "min"
  maxFreq: "base"
- name: fast
  minFreq: "turbo"
  maxFreq: "turbo"
""")
AVAILABLE = IDSet.parse("2-7,10-13")
TURBO, BASE, MIN = "3800000", "2900000", "800000"


def freqs(
    conf: Mapping[str, Any], script: Script, steps: int
) -> tuple[Run, dict[int, tuple[str, str]]]:
    """The first `steps` steps of `script` on a fresh cpufreq tree: the run and each
    CPU's (scaling_min_freq, scaling_max_freq) after them."""
    with tempfile.TemporaryDirectory(prefix="test18-") as root:
        topo = write_sysfs(N4C16, root)
        cpu_dir = write_cpu_class_tree(root, topo, CPUFreqLayout())
        run = simulate(Script(steps=script.steps[:steps], pods=script.pods), conf, sysfs_root=root)
        return run, {
            c: tuple(  # type: ignore[misc]
                (cpu_dir / f"cpu{c}/cpufreq/{n}").read_text().strip()
                for n in ("scaling_min_freq", "scaling_max_freq")
            )
            for c in topo.cpus
        }


TEST = "balloons/n4c16/test18-turbo-priority"


def only(cpus: IDSet) -> int:
    (cpu,) = cpus
    return cpu


def reserved_cpu(run: Run, step: int) -> int:
    b = next(b for b in run.result.steps[step].balloons if b.type == "reserved")
    return only(IDSet.parse(b.cpus))


@port(TEST)
def test_turbo_goes_to_the_highest_priority_active_class() -> None:
    s = Script()
    low = {BALLOON: "turbo-low-bln"}
    s.create(annotations=low, cpureq="750m", cpulim="750m", memreq="100M")  # pod0
    s.create(annotations=low, cpureq="100m", cpulim="100m", memreq="50M")  # pod1
    s.create(annotations={BALLOON: "turbo-high-bln"}, cpureq="750m", cpulim="750m",
             memreq="100M")  # fmt: skip
    s.delete("pod2")
    s.delete("pod1")
    s.delete("pod0")

    # step 1: turbo-low is the only active turbo class: it wins turbo; default-turbo
    # (the reserved CPU) loses it, down to base; idle CPUs are default-noturbo
    run, f1 = freqs(CONFIG, s, 1)
    run.verify(0, 'len(cpus["pod0c0"]) == 1')
    res, low_cpu = reserved_cpu(run, 0), only(run.at(0).cpus("pod0c0"))
    assert res == 10  # their comments and checks: "cpu 10 (default-turbo)"
    assert f1[low_cpu] == (TURBO, TURBO)
    assert f1[res] == (MIN, BASE)
    assert all(f1[c] == (MIN, BASE) for c in AVAILABLE - IDSet([res, low_cpu]))
    assert all(f1[c] == (MIN, TURBO) for c in IDSet.parse("0-1,8-9,14-15"))  # untouched
    # step 1b: a second container in the same turbo-low balloon changes nothing
    _, f1b = freqs(CONFIG, s, 2)
    assert f1b == f1
    # step 2: turbo-high wins; turbo-low and default-turbo get base
    run, f2 = freqs(CONFIG, s, 3)
    run.verify(2, 'len(cpus["pod2c0"]) == 1')
    high_cpu = only(run.at(2).cpus("pod2c0"))
    assert f2[high_cpu] == (TURBO, TURBO)
    assert f2[low_cpu] == (BASE, BASE)
    assert f2[res] == (MIN, BASE)
    # step 3: turbo-high gone: turbo-low regains turbo, its CPU is idle again
    _, f3 = freqs(CONFIG, s, 4)
    assert f3[low_cpu] == (TURBO, TURBO)
    assert f3[high_cpu] == (MIN, BASE)
    assert f3[res] == (MIN, BASE)
    # step 4: pod1 leaves, the balloon keeps its CPU: no change
    _, f4 = freqs(CONFIG, s, 5)
    assert f4 == f3
    # step 5: the last turbo-low container leaves: default-turbo regains turbo
    _, f5 = freqs(CONFIG, s, 6)
    assert f5[low_cpu] == (MIN, BASE)
    assert f5[res] == (MIN, TURBO)


@port(TEST)
def test_control_cpu_classes_still_configure_cpus() -> None:
    s = Script(pods=3)  # their pod counter runs on over the relaunch
    s.create(annotations={BALLOON: "legacy-bln"}, cpureq="750m", cpulim="750m", memreq="100M")
    run, f = freqs(OLD_SYNTAX, s, 1)
    run.verify(0, 'len(cpus["pod3c0"]) == 1')
    fast = only(run.at(0).cpus("pod3c0"))
    assert f[fast] == (TURBO, TURBO)
    idle = AVAILABLE - IDSet([fast, reserved_cpu(run, 0)])
    assert all(f[c] == (MIN, BASE) for c in idle)


@port(TEST)
def test_default_class_for_idle_and_reserved_cpus() -> None:
    s = Script(pods=4)
    s.create(annotations={BALLOON: "fast-bln"}, cpureq="750m", cpulim="750m", memreq="100M")
    s.delete("pod4")
    run, f = freqs(DEFAULT_CLASS, s, 1)
    run.verify(0, 'len(cpus["pod4c0"]) == 1')
    fast = only(run.at(0).cpus("pod4c0"))
    assert reserved_cpu(run, 0) == 10  # theirs: "Reserved CPU (10)"
    assert f[fast] == (TURBO, TURBO)
    # no idleCPUClass and no cpuClass on the reserved type: both are "default"
    assert all(f[c] == (MIN, BASE) for c in AVAILABLE - IDSet([fast]))
    _, f = freqs(DEFAULT_CLASS, s, 2)
    assert all(f[c] == (MIN, BASE) for c in AVAILABLE)


@port(TEST)
def test_turbo_domain_package_and_system() -> None:
    s = Script(pods=5)
    s.create(annotations={BALLOON: "turbo-high-bln"}, cpureq="750m", cpulim="750m",
             memreq="100M")  # fmt: skip
    one_per_package = {**CONFIG, "availableResources": {"cpu": "cpuset:2,10"},
                       "reservedResources": {"cpu": "1000m"}}  # fmt: skip
    run, f = freqs(one_per_package, s, 1)
    run.verify(0, 'len(cpus["pod5c0"]) == 1')
    high, res = only(run.at(0).cpus("pod5c0")), reserved_cpu(run, 0)
    assert {high, res} == {2, 10}  # one CPU in each package
    assert f[high] == (TURBO, TURBO)
    assert f[res] == (MIN, TURBO)  # package: nothing competes in the reserved CPU's
    _, f = freqs({**one_per_package, "turboDomain": "system"}, s, 1)
    assert f[res] == (MIN, BASE)  # system: turbo-high wins everywhere

"""n4c16/test02-prometheus-metrics, its placements: hide-hyperthreads per container,
preferNewBalloons, inflating, deflating, popping and re-creating instances.

Their test reads these from the Prometheus balloons metric (instance names, CPU counts,
``tot_req_millicpu``); here they are read from the placements, which is what the metric
reports.  Our metric names and labels are the metrics tests' (balloons-core).
"""

from __future__ import annotations

from tests.parity.balloons._sim import BALLOON, Script, config, disjoint, res, simulate

CONFIG = config("""
reservedResources:
  cpu: "1"
balloonTypes:
  - name: full-core
    minCPUs: 2
    maxCPUs: 2
    hideHyperthreads: true
    cpuClass: normal
  - name: fast-dualcore
    minCPUs: 4
    maxCPUs: 4
    cpuClass: turbo
    preferNewBalloons: true
  - name: flex
    maxCPUs: 8
    cpuClass: slow
""")


def test_prometheus_metrics_placements() -> None:
    s = Script()
    pod0 = s.create(
        contcount=2,
        annotations={
            BALLOON: "full-core",
            "hide-hyperthreads.resource-policy.nri.io/container.pod0c1": "false",
        },
        **res("100m", "100M"),
    )
    fast = {BALLOON: "fast-dualcore"}
    flex = {BALLOON: "flex"}
    pod1 = s.create(annotations=fast, **res("200m", ""))
    pod2 = s.create(annotations=fast, **res("500m", ""))
    pod3 = s.create(annotations=flex, **res("3500m", ""))
    pod4 = s.create(annotations=flex, **res("1200m", ""))
    deflated = s.delete("pod3")
    s.delete("pod4")
    popped = s.delete("pod1")
    pod5 = s.create(annotations=fast, **res("4000m", "100M"))
    run = simulate(s, CONFIG)

    p = run.at(pod0)  # full-core[0]: pod0c0 sees one thread of the core, pod0c1 both
    assert len(p.cpus("pod0c0")) == 1
    assert len(p.cpus("pod0c1")) == 2
    assert p.cpus("pod0c0") <= p.cpus("pod0c1")
    assert len(p.cores("pod0c1")) == 1
    p = run.at(pod1)
    assert len(p.cpus("pod1c0")) == 4
    p = run.at(pod2)  # fast-dualcore[1], a new instance
    assert len(p.cpus("pod2c0")) == 4
    assert disjoint(p.cpus("pod1c0"), p.cpus("pod2c0"))
    assert len(run.at(pod3).cpus("pod3c0")) == 4
    p = run.at(pod4)  # flex[0] inflated to fit 3.5 + 1.2 CPUs
    assert p.cpus("pod3c0") == p.cpus("pod4c0")
    assert len(p.cpus("pod4c0")) == 5
    assert len(run.at(deflated).cpus("pod4c0")) == 2
    assert run.at(popped).live("pod1c") == []
    p = run.at(pod5)  # a new fast-dualcore instance beside pod2's
    assert len(p.cpus("pod5c0")) == 4
    assert disjoint(p.cpus("pod5c0"), p.cpus("pod2c0"))

"""n4c16/test02-prometheus-metrics: hide-hyperthreads per container, preferNewBalloons,
inflating, deflating, popping and re-creating instances, as their balloons metric shows.

Their metric checks are evaluated as written over the balloons' lines as their metrics
callback would write them (`tests.parity.ports.metric_lines`), the first six on the
balloons of the launch (`Script.launched`).  The daemon's own Prometheus names are the
metrics tests'.
"""

from __future__ import annotations

from tests.parity.balloons._sim import BALLOON, Script, config, res, simulate
from tests.parity.ports import port

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


@port("balloons/n4c16/test02-prometheus-metrics")
def test_prometheus_metrics() -> None:
    s = Script()
    launch = s.launched()
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
    popped_flex = s.delete("pod4")
    popped = s.delete("pod1")
    pod5 = s.create(annotations=fast, **res("4000m", "100M"))
    run = simulate(s, CONFIG)

    run.metrics(
        launch,
        has=[r'balloon="default\[0\]"', r'balloon="reserved\[0\]"'],
        has_no=[
            r'balloon="full-core\[0\]"',
            r'balloon_type="full-core"',
            r'balloon_type="fast-dualcore"',
            r'balloon_type="flex"',
        ],
    )
    run.metrics(
        pod0,
        has=[
            r'balloon="default\[0\]"',
            r'balloon="reserved\[0\]"',
            r'nri_policy_balloons_cores{balloon="full-core\[0\]",balloon_type="full-core",'
            r'containers="default/pod0/pod0c0,default/pod0/pod0c1",cpu_class="normal",'
            r'cpus=".*",cpus_allowed=".*",cpus_allowed_count="2",cpus_count="2",cpus_max="2",'
            r'cpus_min="2",dies="p[01]d[01]",dies_count="1",groups="",mems="[0-3]",'
            r'numas="p[01]d[01]n[0-3]",numas_count="1",packages="p[01]",packages_count="1",'
            r'sharedidlecpus="",sharedidlecpus_count="0",tot_req_millicpu="(199|200)"} 2',
        ],
    )
    run.verify(
        pod0,
        'len(cpus["pod0c0"]) == 1',
        'len(cpus["pod0c1"]) == 2',
        'cpus["pod0c0"].issubset(cpus["pod0c1"])',
    )
    run.metrics(
        pod1,
        has=[r'balloon="fast-dualcore\[0\]".*tot_req_millicpu="(199|200)".* 4'],
        has_no=[r'balloon="fast-dualcore\[1\]"'],
    )
    run.metrics(
        pod2,
        has=[
            r'balloon="fast-dualcore\[0\]"',
            r'balloon="fast-dualcore\[1\]".*tot_req_millicpu="500".* 4',
        ],
        has_no=[r'balloon_type="flex"'],
    )
    run.metrics(pod3, has=[r'balloon_type="flex".* 4'])
    run.metrics(pod4, has=[r'balloon_type="flex"', r'balloon_type="flex".* 5'])
    run.metrics(deflated, has=[r'balloon_type="flex"', r'balloon_type="flex".* 2'])
    run.metrics(popped_flex, has_no=[r'balloon_type="flex"'])
    run.metrics(
        popped,
        has=[r'balloon="fast-dualcore\[1\]"'],
        has_no=[r'balloon="fast-dualcore\[0\]"'],
    )
    run.metrics(
        pod5,
        has=[
            r'balloon="fast-dualcore\[1\]".*pod2c0.* 4',
            r'balloon="fast-dualcore\[0\]".*pod5c0.* 4',
        ],
    )

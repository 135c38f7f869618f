"""nri-resmgr on the two-node cluster with synthetic NUMA nodes: shared by
tests/e2e_kube/test_cluster.py and bench/numa_nodes.py.

Theory of operation: `deploy(kc, image)` imports the image into each node's containerd,
writes the node's sysfs tree (`write_sysfs` of `SYNTHETIC`: two NUMA nodes over the
machine's two real CPUs, CPU 0 on node 0 and CPU 1 on node 1) and installs one chart
release per node (`nri-resmgr-<node>` in namespace `nri-<node>`, `nodeSelector` on the
node's hostname label), because the NRI socket and the sysfs tree are host paths of each
node; then waits for each node's NodeResourceTopology object.  `chart_values` says how:
the static policy with `RESERVED` CPU 0, memory pinning off (the kernel has one memory
node: a `cpuset.mems` of synthetic node 1 would make runc fail) and no CPU request for
the daemon (so that the kube-scheduler's own count, 2 CPUs a node, never decides where
only the NUMA zones should).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from nri_resmgr.topology.load import load_topology
from nri_resmgr.topology.synthetic.sysfs import write_sysfs
from tests.e2e_kube.image import Image
from tests.e2e_kube.node import KubeCluster, Node
from tests.support.requirements import REPO

CHART = REPO / "charts" / "nri-resmgr"
NRT = "noderesourcetopologies.topology.node.k8s.io"
#: two NUMA nodes of one CPU each, over the machine's CPUs 0 and 1
SYNTHETIC = "packages=1,nodes=2,cores=1,threads=1,memory=1G"
RESERVED = frozenset({0})


def namespace(node: Node) -> str:
    return f"nri-{node.name}"


def chart_values(node: Node, image: Image, sys_dir: Path) -> dict[str, Any]:
    """The values of `node`'s release (module docstring)."""
    return {
        "image": {"repository": image.repository, "tag": image.tag, "pullPolicy": "Never"},
        "hostPaths": {"nriSocketDir": str(node.ctd.layout.base), "sys": str(sys_dir)},
        "stateDir": str(node.base / "nri-resmgr-state"),
        "nodeSelector": {"kubernetes.io/hostname": node.name},
        "policy": "static",
        "policyConfig": {
            "reservedSystemCPUs": ",".join(map(str, sorted(RESERVED))),
            "reservedResources": None,
            "pinCPU": None,
            "pinMemory": False,
        },
        # a report follows each decision within a second; the periodic one, which also
        # writes back an object someone else changed or deleted, is kept out of the way
        # of the tests that write such objects
        "nodeResourceTopology": {"enable": True, "interval": 600},
        # null removes the chart's default CPU requests
        "resources": {"requests": {"cpu": None, "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "uninstall": {"resources": {"requests": {"cpu": None}}},
        "log": {"level": "info", "format": "json"},
    }


def nrt(node: Node) -> dict[str, Any] | None:
    """`node`'s NodeResourceTopology object, None while there is none."""
    r = node.kubectl("get", NRT, node.name, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def deploy(kc: KubeCluster, image: Image) -> None:
    """One chart release per node, each daemon on its node's synthetic sysfs tree."""
    topology = load_topology(SYNTHETIC)
    for node in kc.nodes:
        node.ctd.import_image(image.archive)
        write_sysfs(topology, node.base / "synthetic")
        path = node.base / "values.yaml"
        path.write_text(yaml.safe_dump(chart_values(node, image, node.base / "synthetic" / "sys")))
        node.run(
            "helm", "install", f"nri-resmgr-{node.name}", str(CHART),
            "--namespace", namespace(node), "--create-namespace", "-f", str(path),
            "--wait", "--timeout", "300s",
            timeout=360,
        )  # fmt: skip
    for node in kc.nodes:
        node.wait_for(lambda n=node: nrt(n), timeout=120, what=f"the NRT object of {node.name}")

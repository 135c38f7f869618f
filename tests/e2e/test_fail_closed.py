"""Failing closed on a real containerd 2.3 and CRI-O 1.36: `enable-nri --require`.

The runtime's configuration (containerd's config.toml, CRI-O's NRI drop-in) is edited by
`nri-resmgr enable-nri --require` itself and the runtime restarted. While the daemon is
away (before its first start, and after kill -9) `crictl create` fails with the validator's
reason; the same creation retried once the daemon is back is placed, and the cpusets read
from the kernel are the static policy's: no container the validator covers runs unplaced
(the tolerated pod, the daemon's own stand-in, is exempt by design).

The daemon runs here as a bare process, not in a pod. In a pod, its own container's exit is
an NRI StopContainer event (containerd relays task exits), and that event is what makes NRI
drop a dead plugin (`removeClosedPlugins` runs after each event); before it, a dead plugin
still counts as present for one CreateContainer (tests/conformance/test_fail_closed.py shows
it through the library). Here the pod removal after the kill is that event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nri_resmgr.cli import main
from nri_resmgr.ops.runtime_config import TOLERATE_ANNOTATION
from tests.e2e import cri
from tests.e2e import crio as criomod
from tests.e2e.containerd import CONTAINERD_2, Containerd
from tests.e2e.resmgr import STATIC, Daemon, assert_no_double_exclusive, await_cpus
from tests.e2e.resmgr import daemon as daemon  # the fixture

REFUSED = 'validation error: required plugin "resmgr" not present'


def _refused(ctd: Containerd, pod: cri.Pod, name: str, resources: cri.Resources) -> str:
    created, stderr = cri.create_container(ctd, pod, name, resources=resources, check=False)
    assert created is None, f"{pod.name}/{name} was created while the daemon was away"
    return stderr


@pytest.mark.parametrize(
    "release", [CONTAINERD_2.name, criomod.CRIO.name], ids=["ctd2", "crio"], indirect=True
)
def test_required_plugin_refuses_creation_until_the_daemon_is_back(
    containerd: Containerd, daemon: Callable[[dict[str, Any]], Daemon]
) -> None:
    ctd = containerd
    ctd.stop()
    if isinstance(ctd, criomod.Crio):
        runtime, config = "crio", ctd.nri_dropin
    else:
        runtime, config = "containerd", ctd.layout.config
    assert main(["enable-nri", "--runtime", runtime, "--config", str(config), "--require"]) == 0
    ctd.start()

    # No daemon yet: the validator refuses; a pod with the tolerate annotation is created.
    web = cri.run_pod(ctd, "web")
    assert REFUSED in _refused(ctd, web, "app", cri.BURSTABLE_SMALL)
    own = cri.run_pod(ctd, "own", namespace="kube-system",
                      annotations={TOLERATE_ANNOTATION: "true"})
    cri.run_container(ctd, own, "daemon")

    d = daemon(STATIC).start()
    d.wait_synced(1)
    # the kubelet's retry of the same container: placed
    b = cri.run_container(ctd, web, "app", resources=cri.BURSTABLE_SMALL)
    db = cri.run_pod(ctd, "db", qos=cri.QoS.GUARANTEED)
    g = cri.run_container(ctd, db, "pg", resources=cri.GUARANTEED_1CPU)
    assert (cri.cpus_of(ctd, g), cri.cpus_of(ctd, b)) == ("1", "0")

    d.kill9()
    cri.remove_pod(ctd, db)  # an event after the death: NRI drops the dead plugin
    db2 = cri.run_pod(ctd, "db2", qos=cri.QoS.GUARANTEED)
    assert REFUSED in _refused(ctd, db2, "pg", cri.GUARANTEED_1CPU)
    assert REFUSED in _refused(ctd, web, "app-2", cri.BURSTABLE_SMALL)
    assert cri.cpus_of(ctd, b) == "0", "nobody touched the running container"

    d.start()
    d.wait_synced(2)
    g2 = cri.run_container(ctd, db2, "pg", resources=cri.GUARANTEED_1CPU)
    b2 = cri.run_container(ctd, web, "app-2", resources=cri.BURSTABLE_SMALL)
    assert (cri.cpus_of(ctd, g2), cri.cpus_of(ctd, b2)) == ("1", "0")
    await_cpus(ctd, b, "0", "the shared container stays off the exclusive CPU")
    assert_no_double_exclusive(ctd, {"db2/pg": g2}, [b, b2])

"""The chart's uninstall reset (issue 10 item 11), rendered by the real helm.

The reset container must see what the daemon sees (same socket, sysfs root, state dir and,
with RDT, resctrl mount and capabilities), watch its own DaemonSet by the name the chart
gives it, wait for the daemon's own HTTP port, and be allowed to read that one DaemonSet.
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest

from tests.integration.test_helm import CHART, KUBE_VERSION, VALUES, daemonset, render
from tests.integration.test_helm import helm as helm
from tests.support.requirements import REPO


def _containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    spec = daemonset(docs)["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"]}


def _arg(container: dict[str, Any], flag: str) -> str:
    args: list[str] = container["args"]
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")]
    return value


def test_reset_container_mirrors_the_daemon_and_watches_its_daemonset(helm: str) -> None:
    import kubernetes_validate

    docs = render(helm)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    containers = _containers(docs)
    daemon, reset = containers["nri-resmgr"], containers["reset-on-uninstall"]
    ds = daemonset(docs)
    assert reset["args"][0] == "reset"
    assert _arg(reset, "--on-uninstall") == f"kube-system/{ds['metadata']['name']}"
    port = daemon["ports"][0]["containerPort"]
    assert _arg(reset, "--wait-port") == f"127.0.0.1:{port}"
    for flag in ("--socket", "--sysfs-root", "--state-dir"):
        assert _arg(reset, flag) == _arg(daemon, flag), flag
    assert "--no-resctrl" in reset["args"]
    assert float(_arg(reset, "--timeout")) < 30  # inside the default grace period
    mounts = {m["name"]: m for m in reset["volumeMounts"]}
    daemon_mounts = {m["name"]: m for m in daemon["volumeMounts"]}
    assert set(mounts) == {"nri-socket", "sys", "state", "reset-handoff"}
    for name, m in mounts.items():
        if name != "reset-handoff":
            assert m == daemon_mounts[name], name
    # the work runs in the preStop hook, before the kubelet's CRI stop of this container
    # (which holds NRI's synchronization on containerd), with the same arguments; the main
    # process and the hook meet in the hand-off emptyDir
    hook = reset["lifecycle"]["preStop"]["exec"]["command"]
    entrypoint = re.search(r"^ENTRYPOINT (.*)$", (REPO / "Containerfile").read_text(), re.M)
    assert entrypoint, "Containerfile: no ENTRYPOINT"
    assert hook == [*json.loads(entrypoint.group(1)), *reset["args"], "--prestop"]
    handoff = _arg(reset, "--handoff-dir")
    assert mounts["reset-handoff"]["mountPath"] == handoff
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["reset-handoff"]
    assert reset["securityContext"] == daemon["securityContext"]
    assert reset["image"] == daemon["image"]
    # the only permission it adds: get on this one DaemonSet
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-reset")]
    assert role["rules"] == [{
        "apiGroups": ["apps"], "resources": ["daemonsets"],
        "resourceNames": [ds["metadata"]["name"]], "verbs": ["get"],
    }]  # fmt: skip
    (binding,) = [
        d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"].endswith("-reset")
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa,
                                    "namespace": "kube-system"}]  # fmt: skip


def test_with_rdt_the_reset_removes_the_daemons_groups(helm: str) -> None:
    containers = _containers(render(helm, VALUES / "rdt-on.yaml"))
    daemon, reset = containers["nri-resmgr"], containers["reset-on-uninstall"]
    assert "--no-resctrl" not in reset["args"]
    resctrl = [m for m in reset["volumeMounts"] if m["name"] == "resctrl"]
    assert resctrl == [m for m in daemon["volumeMounts"] if m["name"] == "resctrl"]
    assert reset["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN", "DAC_OVERRIDE"]


def test_reset_can_be_turned_off(helm: str) -> None:
    docs = render(helm, None, "uninstall.resetContainers=false")
    assert list(_containers(docs)) == ["nri-resmgr"]
    volumes = daemonset(docs)["spec"]["template"]["spec"]["volumes"]
    assert "reset-handoff" not in {v["name"] for v in volumes}
    assert not [d for d in docs if d["metadata"]["name"].endswith("-reset")]


@pytest.mark.parametrize("setting", ["uninstall.timeout=40", "uninstall.resetContainers=1"])
def test_schema_rejects_bad_reset_values(helm: str, setting: str) -> None:
    out = subprocess.run(
        [helm, "template", "t", str(CHART), "--kube-version", KUBE_VERSION, "--set", setting],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0
    assert "uninstall" in out.stderr

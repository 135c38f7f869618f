"""The Helm chart: lint, render and schema-validate with the real helm and Kubernetes schemas.

helm is built from its Go module (pinned) into .cache/bin on first use.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nri_resmgr.ops.runtime_config import TOLERATE_ANNOTATION
from tests.peers import build_helm
from tests.support.requirements import REPO

CHART = REPO / "charts" / "nri-resmgr"
VALUES = Path(__file__).parent / "helm-values"
KUBE_VERSION = "1.34.0"


@pytest.fixture(scope="module")
def helm() -> str:
    return build_helm()


def render(helm: str, values: Path | None = None, *sets: str) -> list[dict[str, Any]]:
    args = [
        helm,
        "template",
        "t",
        str(CHART),
        "--namespace",
        "kube-system",
        "--kube-version",
        KUBE_VERSION,
    ]
    if values is not None:
        args += ["-f", str(values)]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def daemonset(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    assert isinstance(ds, dict)
    return ds


def main_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = daemonset(docs)["spec"]["template"]["spec"]["containers"]
    (c,) = [c for c in containers if c["name"] == "nri-resmgr"]
    assert isinstance(c, dict)
    return c


def values_files() -> Iterator[Path]:
    return iter(sorted(VALUES.glob("*.yaml")))


def test_default_render_and_lint_need_no_flags(helm: str) -> None:
    """`helm template charts/nri-resmgr` as a user first runs it: no --kube-version."""
    lint = subprocess.run([helm, "lint", str(CHART)], capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    out = subprocess.run(
        [helm, "template", "t", str(CHART)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert daemonset(docs)["metadata"]["name"] == "t-nri-resmgr"


@pytest.mark.parametrize("values", list(values_files()), ids=lambda p: p.stem)
def test_lint_render_and_validate_against_kubernetes_schemas(helm: str, values: Path) -> None:
    import kubernetes_validate

    lint = subprocess.run(
        [helm, "lint", str(CHART), "-f", str(values)], capture_output=True, text=True, timeout=120
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = render(helm, values)
    kinds = sorted(d["kind"] for d in docs)
    # the second Role/RoleBinding: the uninstall reset reads its DaemonSet (test_reset_helm)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "ServiceAccount",
    ]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_defaults_are_least_privilege(helm: str) -> None:
    docs = render(helm)
    spec = daemonset(docs)["spec"]["template"]["spec"]
    c = main_container(docs)
    assert spec["priorityClassName"] == "system-node-critical"
    assert "hostPID" not in spec and "initContainers" not in spec
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    annotations = daemonset(docs)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8891"
    mounts = {m["name"] for m in c["volumeMounts"]}
    assert mounts == {"config", "nri-socket", "sys", "state"}
    assert "--plugin-index=90" in c["args"]


def test_rdt_on_adds_capabilities_and_resctrl_mount(helm: str) -> None:
    docs = render(helm, VALUES / "rdt-on.yaml")
    c = main_container(docs)
    assert c["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN", "DAC_OVERRIDE"]
    resctrl = [m for m in c["volumeMounts"] if m["name"] == "resctrl"]
    assert resctrl == [{"name": "resctrl", "mountPath": "/host/sys/fs/resctrl"}]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config["control"]["rdt"] == {"enable": True, "usePodQoSAsDefaultClass": True}


def test_node_resource_topology_reporting(helm: str) -> None:
    docs = render(helm, VALUES / "nrt-on.yaml")
    c = main_container(docs)
    assert "--node-resource-topology" in c["args"]
    assert "--report-interval=60" in c["args"]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    assert any("noderesourcetopologies" in r["resources"] for r in role["rules"])
    default = render(helm)
    assert "--node-resource-topology" not in main_container(default)["args"]
    (role,) = [d for d in default if d["kind"] == "ClusterRole"]
    assert not any("noderesourcetopologies" in r["resources"] for r in role["rules"])
    (cm,) = [d for d in default if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["name"] == "nri-resmgr-config.default"


def test_pod_resources_mounts_the_kubelets_socket_directory(helm: str) -> None:
    c = main_container(render(helm, None, "podResources.enable=true"))
    assert "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in c["args"]
    mounts = [m for m in c["volumeMounts"] if m["name"] == "pod-resources"]
    assert mounts == [
        {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}
    ]
    assert not any(a.startswith("--pod-resources") for a in main_container(render(helm))["args"])


def test_enable_nri_init_container_for_crio(helm: str) -> None:
    docs = render(helm, VALUES / "enable-nri-crio.yaml")
    spec = daemonset(docs)["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    command = init["command"][2]
    assert "enable-nri --runtime crio" in command
    assert "--config /host/etc/crio/crio.conf.d/10-enable-nri.conf" in command
    assert "--request-timeout 3s" in command
    assert "systemctl" not in command
    assert init["securityContext"]["capabilities"]["add"] == ["DAC_OVERRIDE"]
    c = main_container(docs)
    assert c["ports"][0]["containerPort"] == 9100
    assert "--plugin-index=45" in c["args"]
    assert "prometheus.io/scrape" not in daemonset(docs)["spec"]["template"]["metadata"].get(
        "annotations", {}
    )


def test_require_fails_closed_and_exempts_the_daemons_own_pod(helm: str) -> None:
    docs = render(helm, VALUES / "require-containerd.yaml")
    template = daemonset(docs)["spec"]["template"]
    (init,) = template["spec"]["initContainers"]
    assert init["command"][2].split("enable-nri", 1)[1].split() == [
        "--runtime", "containerd", "--config", "/host/etc/containerd/config.toml",
        "--require", "--plugin-name", "resmgr-edge",
    ]  # fmt: skip
    assert template["metadata"]["annotations"][TOLERATE_ANNOTATION] == "true"
    default = daemonset(render(helm))["spec"]["template"]
    assert "--require" not in str(default)
    assert default["metadata"]["annotations"][TOLERATE_ANNOTATION] == "true"


def test_require_without_the_init_container_is_refused(helm: str) -> None:
    out = subprocess.run(
        [helm, "template", "t", str(CHART), "--kube-version", KUBE_VERSION,
         "--set", "nri.require=true"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0
    assert "nri.require writes the runtime configuration through the enable-nri init" in (
        out.stderr
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("pluginIndex=9", "pluginIndex"),
        ("nri.runtime=docker", "runtime"),
        ("instrumentation.httpPort=70000", "httpPort"),
        ("nri.requestTimeout=soon", "requestTimeout"),
        ("podResources.dir=relative/path", "dir"),
    ],
)
def test_schema_rejects_bad_values(helm: str, setting: str, message: str) -> None:
    out = subprocess.run(
        [
            helm,
            "template",
            "t",
            str(CHART),
            "--kube-version",
            KUBE_VERSION,
            "--set-string" if setting.startswith(("pluginIndex", "nri.")) else "--set",
            setting,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert message in out.stderr

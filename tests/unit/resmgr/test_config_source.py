"""Configuration sources: precedence, validation, live reload with revert."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from nri_resmgr.config import Config
from nri_resmgr.kube.config_source import (
    LiveConfig,
    Outcome,
    Resolved,
    Source,
    configmap_names,
    node_status,
    resolve,
)
from nri_resmgr.model import ConfigError


def cm(name: str, text: str, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}, "data": {"config.yaml": text}}


ALL = {
    "nri-resmgr-config.node.w1": cm("nri-resmgr-config.node.w1", "policy: none\n"),
    "nri-resmgr-config.group.gpu": cm("nri-resmgr-config.group.gpu", "policy: static\n"),
    "nri-resmgr-config.default": cm("nri-resmgr-config.default", "policy: topology-aware\n"),
}


@pytest.mark.parametrize(
    ("present", "group", "file", "configure", "policy", "source"),
    [
        pytest.param(
            list(ALL),
            "gpu",
            True,
            "policy: x",
            "none",
            "ConfigMap kube-system/nri-resmgr-config.node.w1",
            id="node-wins",
        ),
        pytest.param(
            list(ALL)[1:],
            "gpu",
            True,
            "",
            "static",
            "ConfigMap kube-system/nri-resmgr-config.group.gpu",
            id="group-next",
        ),
        pytest.param(
            list(ALL)[1:],
            None,
            True,
            "",
            "topology-aware",
            "ConfigMap kube-system/nri-resmgr-config.default",
            id="no-group-label",
        ),
        pytest.param([], None, True, "policy: none", "static", "/etc/f.yaml", id="file"),
        pytest.param(
            [],
            None,
            False,
            "policy: none",
            "none",
            "ConfigureRequest.config",
            id="configure-string",
        ),
        pytest.param([], None, False, "", "topology-aware", "built-in defaults", id="defaults"),
    ],
)
def test_precedence(
    present: list[str], group: str | None, file: bool, configure: str, policy: str, source: str
) -> None:
    got = resolve(
        configmaps={k: ALL[k] for k in present},
        node="w1",
        group=group,
        namespace="kube-system",
        file_text=("/etc/f.yaml", "policy: static\n") if file else None,
        configure_text=configure,
    )
    assert got.config.policy == policy
    assert got.source.name == source


def test_names_in_order() -> None:
    assert configmap_names("n", "g") == [
        "nri-resmgr-config.node.n",
        "nri-resmgr-config.group.g",
        "nri-resmgr-config.default",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("policy: [a\n", "expected YAML or JSON, found an error"),
        ("log: {format: xml}\n", "log.format"),
        ("polcy: none\n", "unknown key polcy; expected one of policy, "),
    ],
)
def test_broken_configmap_is_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        resolve(
            configmaps={"nri-resmgr-config.default": cm("nri-resmgr-config.default", text)},
            node="n",
            group=None,
            namespace="ns",
        )
    assert "ConfigMap ns/nri-resmgr-config.default" in str(info.value)


def test_configmap_without_key() -> None:
    with pytest.raises(ConfigError, match=r"no key 'config\.yaml'"):
        resolve(
            configmaps={"nri-resmgr-config.default": {"data": {"other": "x"}}},
            node="n",
            group=None,
            namespace="ns",
        )


def _resolved(policy: str, name: str) -> Resolved:
    return Resolved(Config(policy=policy), Source(name=name, text=f"policy: {policy}"))


def test_live_reload_applies_and_reverts() -> None:
    applied: list[str] = []
    outcomes: list[Outcome] = []

    def apply(config: Config) -> None:
        if config.policy == "broken":
            raise RuntimeError("policy refused the machine")
        applied.append(config.policy)

    live = LiveConfig(_resolved("static", "a"), apply=apply, report=outcomes.append)
    assert live.offer(lambda: _resolved("none", "b")).applied
    assert applied == ["none"] and live.current.config.policy == "none"
    out = live.offer(lambda: _resolved("broken", "c"))
    assert not out.applied
    assert "applying c failed: policy refused the machine" in out.message
    assert "previous configuration from b restored" in out.message
    assert applied == ["none", "none"]  # the previous one was re-applied
    assert live.current.config.policy == "none"

    def invalid() -> Resolved:
        raise ConfigError("ConfigMap ns/x: log.format: expected one of auto, json, console")

    out = live.offer(invalid)
    assert not out.applied and "keeping b" in out.message
    assert live.offer(lambda: _resolved("none", "d")).message == "unchanged"
    assert [o.applied for o in outcomes] == [True, False, False]


class NullyApiServer:
    """Answers the watcher's GETs the way the API server may: nulls for empty fields."""

    def __init__(self, items: list[dict[str, Any]] | None) -> None:
        self.items = items

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert method == "GET"
        if path == "/api/v1/nodes/w1":
            return {"metadata": {"name": "w1", "labels": None}}
        assert path == "/api/v1/namespaces/kube-system/configmaps"
        return {"metadata": {"resourceVersion": None}, "items": self.items}


@pytest.mark.parametrize(
    ("items", "policy"),
    [
        (None, "topology-aware"),
        ([{"metadata": None}, cm("nri-resmgr-config.default", "policy: none\n")], "none"),
    ],
    ids=["no-items", "item-without-metadata"],
)
def test_watcher_relist_takes_nulls_as_empty(
    items: list[dict[str, Any]] | None, policy: str
) -> None:
    from typing import cast

    from nri_resmgr.kube.agent import ConfigWatcher
    from nri_resmgr.kube.client import KubeClient

    api = NullyApiServer(items)
    watcher = ConfigWatcher(cast(KubeClient, api), node="w1", namespace="kube-system")
    assert watcher.relist() == ""
    assert watcher.group is None
    assert watcher.resolve().config.policy == policy


def cr(name: str, spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "config.nri/v1alpha1",
        "kind": "TopologyAwarePolicy",
        "metadata": {"name": name, "namespace": "kube-system", "generation": generation},
        "spec": spec,
        "status": {"nodes": {"other": {"status": "Success", "generation": 3}}},
    }


CRS = {
    ("topologyawarepolicies", "node.w1"): cr("node.w1", {"pinCPU": False}),
    ("topologyawarepolicies", "group.gpu"): cr("group.gpu", {"pinMemory": False}),
    ("topologyawarepolicies", "default"): cr("default", {"colocatePods": True}),
}


@pytest.mark.parametrize(
    ("present", "group", "expected"),
    [
        pytest.param(list(CRS), "gpu", "node.w1", id="node-wins"),
        pytest.param(list(CRS)[1:], "gpu", "group.gpu", id="group-next"),
        pytest.param(list(CRS)[1:], None, "default", id="no-group-label"),
        # nri-plugins' rule: a node labelled into a group has no default resource
        pytest.param(list(CRS)[2:], "gpu", None, id="group-without-resource"),
    ],
)
def test_custom_resources_node_over_group_over_default(
    present: list[tuple[str, str]], group: str | None, expected: str | None
) -> None:
    got = resolve(
        configmaps=ALL,
        node="w1",
        group="gpu",
        namespace="kube-system",
        resources={key: CRS[key] for key in present},
        resource_group=group,
    )
    if expected is None:  # the ConfigMaps are next
        assert got.source.name == "ConfigMap kube-system/nri-resmgr-config.node.w1"
        return
    assert got.source.kind == "resource"
    assert got.source.name == f"TopologyAwarePolicy kube-system/{expected}"
    assert got.source.generation == 1
    assert got.source.path == (
        f"/apis/config.nri/v1alpha1/namespaces/kube-system/topologyawarepolicies/{expected}"
    )
    assert got.config.policy == "topology-aware"
    assert got.config.policy_config == CRS[("topologyawarepolicies", expected)]["spec"]


def test_an_invalid_custom_resource_is_rejected_naming_it() -> None:
    live = LiveConfig(_resolved("static", "a"), apply=lambda c: None, report=lambda o: None)
    bad = {("topologyawarepolicies", "default"): cr("default", {"pinCPUs": True}, 7)}
    out = live.offer(
        lambda: resolve(configmaps={}, node="w1", group=None, namespace="ns", resources=bad)
    )
    assert not out.applied
    assert live.current.config.policy == "static"
    assert out.offered is not None and out.offered.generation == 7
    assert "spec: unknown key pinCPUs" in out.error
    assert "did you mean pinCPU?" in out.error


def test_node_status_patch_has_their_fields() -> None:
    ok = node_status("w1", generation=4)["status"]["nodes"]["w1"]
    assert (ok["status"], ok["generation"], ok["errors"]) == ("Success", 4, "")
    bad = node_status("w1", generation=5, error="spec: wrong")["status"]["nodes"]["w1"]
    assert (bad["status"], bad["generation"], bad["errors"]) == ("Failure", 5, "spec: wrong")
    assert node_status("w1", generation=None) == {"status": {"nodes": {"w1": None}}}


def test_warnings_are_logged_once_when_taken_into_use() -> None:
    """The watcher resolves on every change and relist; a warned key is logged once."""
    spec = {"availableResources": {"memory": "1G"}}
    res = {("topologyawarepolicies", "default"): cr("default", spec)}
    live = LiveConfig(_resolved("static", "a"), apply=lambda c: None, report=lambda o: None)
    with capture_logs() as logs:
        for _ in range(3):
            live.offer(
                lambda: resolve(configmaps={}, node="w1", group=None, namespace="ns", resources=res)
            )
    warned = [e for e in logs if e["event"] == "configuration key has no effect"]
    assert [e["problem"].split(":")[0] for e in warned] == ["spec.availableResources.memory"]
    assert warned[0]["source"] == "TopologyAwarePolicy ns/default"


def test_a_document_that_failed_to_apply_is_not_tried_again_until_it_changes() -> None:
    """The watcher re-offers at every relist; a refused document is not re-applied (and
    the one in force not re-applied either) each time."""
    tried: list[str] = []

    def apply(config: Config) -> None:
        tried.append(config.policy)
        if config.policy == "broken":
            raise RuntimeError("policy refused the machine")

    live = LiveConfig(_resolved("static", "a"), apply=apply, report=lambda o: None)
    outs = [live.offer(lambda: _resolved("broken", "b")) for _ in range(3)]
    assert tried == ["broken", "static"]  # tried once, the previous one restored once
    assert [o.source.name for o in outs] == ["a", "a", "a"]  # in force: still a
    assert all(o.offered is not None and o.offered.name == "b" for o in outs)
    assert all("policy refused the machine" in o.error for o in outs)
    live.offer(lambda: _resolved("none", "b"))  # changed: tried
    assert tried[-1] == "none" and live.current.source.name == "b"

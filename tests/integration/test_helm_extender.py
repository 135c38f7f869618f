"""The chart's optional scheduler extender: off by default, and when on, a Deployment and
Service with read-only RBAC on NodeResourceTopology objects and a kube-scheduler
configuration whose extender entry points at that Service; valid for Kubernetes' schemas."""

from __future__ import annotations

from typing import Any

import yaml

from tests.integration.test_helm import KUBE_VERSION, helm, render

__all__ = ["helm"]  # the fixture, shared with test_helm

NAME = "t-nri-resmgr-scheduler-extender"


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_off_by_default(helm: str) -> None:
    docs = render(helm)
    assert not any("scheduler-extender" in d["metadata"]["name"] for d in docs)


def test_extender_component(helm: str) -> None:
    import kubernetes_validate

    docs = render(helm, None, "schedulerExtender.enable=true",
                  "schedulerExtender.strategy=most-allocated")  # fmt: skip
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    deploy = by_kind(docs, "Deployment")[NAME]
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["nri-resmgr", "scheduler-extender"]
    assert "--strategy=most-allocated" in c["args"]
    # its pods are not the DaemonSet's: the selectors do not overlap
    (ds,) = by_kind(docs, "DaemonSet").values()
    ds_sel = ds["spec"]["selector"]["matchLabels"]
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in ds_sel.items())
    (rule,) = by_kind(docs, "ClusterRole")[NAME]["rules"]
    assert rule["resources"] == ["noderesourcetopologies"]
    assert sorted(rule["verbs"]) == ["get", "list", "watch"]
    assert by_kind(docs, "Service")[NAME]["spec"]["ports"][0]["port"] == 8888
    config = yaml.safe_load(by_kind(docs, "ConfigMap")[f"{NAME}-config"]["data"]
                            ["scheduler-config.yaml"])  # fmt: skip
    (ext,) = config["extenders"]
    assert ext["urlPrefix"] == f"http://{NAME}.kube-system.svc:8888"
    assert (ext["filterVerb"], ext["prioritizeVerb"]) == ("filter", "prioritize")
    assert ext["ignorable"] is True and ext["nodeCacheCapable"] is True
    assert config["profiles"] == [{"schedulerName": "nri-resmgr-numa"}]
    assert f"{NAME}-scheduler" not in by_kind(docs, "Deployment")


def test_second_scheduler(helm: str) -> None:
    import kubernetes_validate

    docs = render(helm, None, "schedulerExtender.enable=true",
                  "schedulerExtender.secondScheduler.enable=true")  # fmt: skip
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    sched = by_kind(docs, "Deployment")[f"{NAME}-scheduler"]
    spec = sched["spec"]["template"]["spec"]
    # extender-rejected pods are retried after 10 s, not kube-scheduler's 5 minutes
    assert "--pod-max-in-unschedulable-pods-duration=10s" in spec["containers"][0]["command"]
    assert spec["volumes"][0]["configMap"]["name"] == f"{NAME}-config"
    roles = {b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding").values()}
    assert {"system:kube-scheduler", "system:volume-scheduler"} <= roles

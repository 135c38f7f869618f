"""Builders for the view tests: a container of a pod, names as given."""

from __future__ import annotations

from collections.abc import Mapping

from nri_resmgr.model import ContainerID, ContainerInfo, Pod, PodID, QoSClass, Request


def container_info(
    cid: str,
    *,
    pod: str = "pod",
    name: str | None = None,
    namespace: str = "default",
    annotations: Mapping[str, str] | None = None,
) -> ContainerInfo:
    """Container `cid` (named `cid` unless `name`) of pod `pod`."""
    return ContainerInfo(
        id=ContainerID(cid),
        name=name if name is not None else cid,
        pod=Pod(
            id=PodID(f"{namespace}/{pod}"),
            uid=f"uid-{pod}",
            name=pod,
            namespace=namespace,
            qos_class=QoSClass.BURSTABLE,
            annotations=dict(annotations or {}),
        ),
        request=Request(),
    )

"""Builders of the NRI messages plugins usually look at: a pod sandbox, a container."""

from __future__ import annotations

from collections.abc import Iterable

from nri_api import api

__all__ = ["make_container", "make_pod"]


def make_pod(
    id: str = "pod0",
    *,
    name: str = "pod0",
    namespace: str = "default",
    uid: str = "uid-pod0",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> api.PodSandbox:
    """A PodSandbox with the fields plugins usually look at."""
    return api.PodSandbox(
        id=id,
        name=name,
        namespace=namespace,
        uid=uid,
        annotations=annotations or {},
        labels=labels or {},
    )


def make_container(
    id: str = "ctr0",
    *,
    pod: api.PodSandbox | None = None,
    name: str = "ctr0",
    annotations: dict[str, str] | None = None,
    env: Iterable[str] = (),
    state: int = api.ContainerState.CONTAINER_RUNNING,
) -> api.Container:
    """A Container of `pod` with the fields plugins usually look at."""
    return api.Container(
        id=id,
        pod_sandbox_id=pod.id if pod is not None else "pod0",
        name=name,
        annotations=annotations or {},
        env=list(env),
        state=state,  # type: ignore[arg-type]
    )

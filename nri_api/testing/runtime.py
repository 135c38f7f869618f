"""`FakeRuntime`: the pod and container events a runtime sends, over a `RuntimeEndpoint`.

Theory of operation
-------------------
`FakeRuntime` plays the part of containerd or CRI-O: its connections, registration,
Configure and Synchronize are the `RuntimeEndpoint`'s (`nri_api.testing.endpoint`);
here are the events.  Events go to the plugin only if it subscribed, as with a real
runtime. The emulated NRI version decides how simple events travel: from v0.12.0 the
dedicated RPC, falling back to StateChange on UNIMPLEMENTED; before that StateChange
only.  An event with a reply (CreateContainer, UpdateContainer, StopContainer,
UpdatePodSandbox, ValidateContainerAdjustment) the plugin did not subscribe to gets
the empty reply a runtime would use, without a call.
"""

from __future__ import annotations

from google.protobuf.message import Message

from nri_api import api
from nri_api.errors import RPCError, StatusCode
from nri_api.events import V0_10_0, Event, has_dedicated_event_rpcs
from nri_api.rpc import EVENT_RPCS, POD_EVENTS, SIMPLE_EVENTS
from nri_api.testing.endpoint import RuntimeEndpoint

__all__ = ["FakeRuntime"]


class FakeRuntime(RuntimeEndpoint):
    """An in-process runtime-side NRI peer (`nri_api.testing`)."""

    async def event(
        self, event: Event, pod: api.PodSandbox, container: api.Container | None = None
    ) -> bool:
        """Deliver a simple event (RunPodSandbox, StartContainer, ...) if subscribed.

        From v0.12.0 the dedicated RPC is tried first and StateChange used on
        UNIMPLEMENTED; before, StateChange only. Returns whether the plugin was called.
        """
        if event not in SIMPLE_EVENTS:
            raise ValueError(f"event {event.name}: expected a simple (no-reply) event")
        if event is Event.POST_UPDATE_POD_SANDBOX and (
            self.nri_version is None or self.nri_version < V0_10_0
        ):
            raise ValueError(f"event {event.name}: NRI {self.nri_version} does not have it")
        peer = self._peer()
        if not peer.events & event.bit:
            return False
        ctr = container if container is not None else api.Container()
        if has_dedicated_event_rpcs(self.nri_version):
            rpc = EVENT_RPCS[event]
            request: Message = (
                rpc.request(pod=pod) if event in POD_EVENTS else rpc.request(pod=pod, container=ctr)
            )
            try:
                await self._call(peer, rpc.method, request, api.Empty)
                return True
            except RPCError as exc:
                if exc.code is not StatusCode.UNIMPLEMENTED:
                    raise
        await self.state_change(event, pod, None if event in POD_EVENTS else ctr)
        return True

    async def state_change(
        self, event: Event, pod: api.PodSandbox, container: api.Container | None = None
    ) -> None:
        """Send a raw StateChange, whatever the subscription."""
        request = api.StateChangeEvent(event=int(event), pod=pod)  # type: ignore[arg-type]
        if container is not None:
            request.container.CopyFrom(container)
        await self._call(self._peer(), "StateChange", request, api.Empty)

    async def run_pod_sandbox(self, pod: api.PodSandbox) -> bool:
        return await self.event(Event.RUN_POD_SANDBOX, pod)

    async def stop_pod_sandbox(self, pod: api.PodSandbox) -> bool:
        return await self.event(Event.STOP_POD_SANDBOX, pod)

    async def remove_pod_sandbox(self, pod: api.PodSandbox) -> bool:
        return await self.event(Event.REMOVE_POD_SANDBOX, pod)

    async def post_update_pod_sandbox(self, pod: api.PodSandbox) -> bool:
        return await self.event(Event.POST_UPDATE_POD_SANDBOX, pod)

    async def post_create_container(self, pod: api.PodSandbox, ctr: api.Container) -> bool:
        return await self.event(Event.POST_CREATE_CONTAINER, pod, ctr)

    async def start_container(self, pod: api.PodSandbox, ctr: api.Container) -> bool:
        return await self.event(Event.START_CONTAINER, pod, ctr)

    async def post_start_container(self, pod: api.PodSandbox, ctr: api.Container) -> bool:
        return await self.event(Event.POST_START_CONTAINER, pod, ctr)

    async def post_update_container(self, pod: api.PodSandbox, ctr: api.Container) -> bool:
        return await self.event(Event.POST_UPDATE_CONTAINER, pod, ctr)

    async def remove_container(self, pod: api.PodSandbox, ctr: api.Container) -> bool:
        return await self.event(Event.REMOVE_CONTAINER, pod, ctr)

    async def create_container(
        self, pod: api.PodSandbox, ctr: api.Container
    ) -> api.CreateContainerResponse:
        """CreateContainer (an empty reply without calling if not subscribed)."""
        if not self.subscribed(Event.CREATE_CONTAINER):
            return api.CreateContainerResponse()
        return await self.call(
            "CreateContainer",
            api.CreateContainerRequest(pod=pod, container=ctr),
            api.CreateContainerResponse,
        )

    async def update_container(
        self, pod: api.PodSandbox, ctr: api.Container, resources: api.LinuxResources
    ) -> api.UpdateContainerResponse:
        """UpdateContainer (an empty reply without calling if not subscribed)."""
        if not self.subscribed(Event.UPDATE_CONTAINER):
            return api.UpdateContainerResponse()
        return await self.call(
            "UpdateContainer",
            api.UpdateContainerRequest(pod=pod, container=ctr, linux_resources=resources),
            api.UpdateContainerResponse,
        )

    async def stop_container(
        self, pod: api.PodSandbox, ctr: api.Container
    ) -> api.StopContainerResponse:
        """StopContainer (an empty reply without calling if not subscribed)."""
        if not self.subscribed(Event.STOP_CONTAINER):
            return api.StopContainerResponse()
        return await self.call(
            "StopContainer",
            api.StopContainerRequest(pod=pod, container=ctr),
            api.StopContainerResponse,
        )

    async def update_pod_sandbox(
        self,
        pod: api.PodSandbox,
        overhead: api.LinuxResources | None = None,
        resources: api.LinuxResources | None = None,
    ) -> api.UpdatePodSandboxResponse:
        """UpdatePodSandbox (v0.10+; an empty reply without calling if not subscribed)."""
        if not self.subscribed(Event.UPDATE_POD_SANDBOX):
            return api.UpdatePodSandboxResponse()
        return await self.call(
            "UpdatePodSandbox",
            api.UpdatePodSandboxRequest(
                pod=pod, overhead_linux_resources=overhead, linux_resources=resources
            ),
            api.UpdatePodSandboxResponse,
        )

    async def validate_container_adjustment(
        self, request: api.ValidateContainerAdjustmentRequest
    ) -> api.ValidateContainerAdjustmentResponse:
        """ValidateContainerAdjustment (v0.10+; accept without calling if not subscribed)."""
        if not self.subscribed(Event.VALIDATE_CONTAINER_ADJUSTMENT):
            return api.ValidateContainerAdjustmentResponse()
        return await self.call(
            "ValidateContainerAdjustment", request, api.ValidateContainerAdjustmentResponse
        )

    async def call_raw(
        self, service: str, method: str, payload: bytes = b"", *, timeout: float | None = None
    ) -> bytes:
        """Send any request to the plugin, e.g. an unknown service or method."""
        peer = self._peer()
        return await peer.trunk.call(
            service, method, payload, timeout=self.request_timeout if timeout is None else timeout
        )

"""A runtime-side NRI peer in Python, for testing plugins without a container runtime.

The public face for plugin authors: `FakeRuntime` plays the part of containerd or CRI-O
over a real Unix socket; `Handshake` is the outcome of a plugin's registration,
Configure and Synchronize; `PluginRejected` is raised when the fake runtime refuses a
plugin as the real one would (`SyncUpdateFailed` when an update of its Synchronize reply
failed, as CRI-O does); `make_pod` and `make_container` build the messages
plugins usually look at.

Inside: `endpoint` is the runtime's side of a plugin connection up to the events
(accepting, RegisterPlugin, Configure, Synchronize, UpdateContainers, calling the
plugin); `runtime` adds the pod and container events a runtime sends; `messages` the
builders.

Usage::

    async with FakeRuntime(nri_version="v0.12.2") as rt:
        await rt.listen(path)
        task = asyncio.create_task(MyPlugin(name="test", idx="10", socket_path=path).serve())
        await rt.wait_ready()
        reply = await rt.create_container(pod, ctr)
"""

from nri_api.testing.endpoint import Handshake, PluginRejected, SyncUpdateFailed
from nri_api.testing.messages import make_container, make_pod
from nri_api.testing.runtime import FakeRuntime

__all__ = [
    "FakeRuntime",
    "Handshake",
    "PluginRejected",
    "SyncUpdateFailed",
    "make_container",
    "make_pod",
]

"""nri_api: the Node Resource Interface (NRI) for Python.

Layers (each usable on its own): `nri_api.mux` (the NRI connection multiplexer),
`nri_api.ttrpc` (ttrpc framing), `nri_api.api` (the NRI protobuf messages), the asyncio
shell `nri_api.transport`, and the plugin stub `nri_api.stub` (built on `nri_api.rpc`, the
table of the Plugin service's RPCs, `nri_api.session`, `nri_api.connection` and
`nri_api.dispatch`). `nri_api.testing` has a runtime-side peer for testing plugins.
A plugin in a few lines::

    from nri_api import Adjustment, Plugin

    class Pin(Plugin):
        def create_container(self, pod, container):
            return Adjustment().set_cpuset("0-3")

    raise SystemExit(Pin.main())
"""

from nri_api import api
from nri_api.builders import Adjustment, Update
from nri_api.errors import RPCError, StatusCode
from nri_api.events import Event
from nri_api.stub import OnClose, Plugin, RuntimeInfo

__all__ = [
    "Adjustment",
    "Event",
    "OnClose",
    "Plugin",
    "RPCError",
    "RuntimeInfo",
    "StatusCode",
    "Update",
    "api",
]

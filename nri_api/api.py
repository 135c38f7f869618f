"""The NRI plugin API (containerd/nri v0.12.2 schema) as Python classes.

Theory of operation: the wire schema lives in `nri_api/_pb/api.proto` and is compiled
into `nri_api/_pb/api_pb2.py` (see docs/schema.md). This module is the one public
name for those generated classes: every message and top-level enum of the schema is
re-exported here by its schema name, so callers write
`from nri_api import api; api.ContainerAdjustment(...)` and never import `_pb`.
Nested enums stay on their message (`api.LogRequest.Level`,
`api.SecurityProfile.ProfileType`). A unit test checks that the list is complete.
"""

from __future__ import annotations

import enum

from nri_api._pb.api_pb2 import (
    CDIDevice,
    CompoundFieldOwners,
    ConfigureRequest,
    ConfigureResponse,
    Container,
    ContainerAdjustment,
    ContainerEviction,
    ContainerState,
    ContainerUpdate,
    CreateContainerRequest,
    CreateContainerResponse,
    Empty,
    Event,
    Field,
    FieldOwners,
    Hook,
    Hooks,
    HugepageLimit,
    Image,
    IOPrioClass,
    KeyValue,
    LinuxContainer,
    LinuxContainerAdjustment,
    LinuxContainerUpdate,
    LinuxCPU,
    LinuxDevice,
    LinuxDeviceCgroup,
    LinuxIOPriority,
    LinuxMemory,
    LinuxMemoryPolicy,
    LinuxNamespace,
    LinuxNetDevice,
    LinuxPids,
    LinuxPodSandbox,
    LinuxRdt,
    LinuxResources,
    LinuxScheduler,
    LinuxSchedulerFlag,
    LinuxSchedulerPolicy,
    LinuxSeccomp,
    LinuxSeccompArg,
    LinuxSyscall,
    LogRequest,
    Mount,
    MpolFlag,
    MpolMode,
    OptionalBool,
    OptionalFileMode,
    OptionalInt,
    OptionalInt32,
    OptionalInt64,
    OptionalRepeatedString,
    OptionalString,
    OptionalUInt32,
    OptionalUInt64,
    OwningPlugins,
    PluginInstance,
    PodSandbox,
    POSIXRlimit,
    PostCreateContainerRequest,
    PostCreateContainerResponse,
    PostStartContainerRequest,
    PostStartContainerResponse,
    PostUpdateContainerRequest,
    PostUpdateContainerResponse,
    PostUpdatePodSandboxRequest,
    PostUpdatePodSandboxResponse,
    RegisterPluginRequest,
    RemoveContainerRequest,
    RemoveContainerResponse,
    RemovePodSandboxRequest,
    RemovePodSandboxResponse,
    RunPodSandboxRequest,
    RunPodSandboxResponse,
    SecurityProfile,
    StartContainerRequest,
    StartContainerResponse,
    StateChangeEvent,
    StopContainerRequest,
    StopContainerResponse,
    StopPodSandboxRequest,
    StopPodSandboxResponse,
    SynchronizeRequest,
    SynchronizeResponse,
    UpdateContainerRequest,
    UpdateContainerResponse,
    UpdateContainersRequest,
    UpdateContainersResponse,
    UpdatePodSandboxRequest,
    UpdatePodSandboxResponse,
    User,
    ValidateContainerAdjustmentRequest,
    ValidateContainerAdjustmentResponse,
)

#: Protobuf package of the schema.
PACKAGE = "nri.pkg.api.v1alpha1"
#: Service the plugin serves (mux connection 1).
PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
#: Service the runtime serves (mux connection 2).
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
#: Host service of WASM plugins; never used over a socket.
HOST_FUNCTIONS_SERVICE = "nri.pkg.api.v1alpha1.HostFunctions"

#: The container states in which a container holds resources (created, running or
#: paused); a stopped or unknown one in a Synchronize report holds none.
LIVE_STATES = frozenset(
    {
        ContainerState.CONTAINER_CREATED,
        ContainerState.CONTAINER_RUNNING,
        ContainerState.CONTAINER_PAUSED,
    }
)


class PluginMethod(enum.StrEnum):
    """Methods of the Plugin service (the runtime calls them on the plugin)."""

    CONFIGURE = "Configure"
    SYNCHRONIZE = "Synchronize"
    SHUTDOWN = "Shutdown"
    RUN_POD_SANDBOX = "RunPodSandbox"
    UPDATE_POD_SANDBOX = "UpdatePodSandbox"
    POST_UPDATE_POD_SANDBOX = "PostUpdatePodSandbox"
    STOP_POD_SANDBOX = "StopPodSandbox"
    REMOVE_POD_SANDBOX = "RemovePodSandbox"
    CREATE_CONTAINER = "CreateContainer"
    POST_CREATE_CONTAINER = "PostCreateContainer"
    START_CONTAINER = "StartContainer"
    POST_START_CONTAINER = "PostStartContainer"
    UPDATE_CONTAINER = "UpdateContainer"
    POST_UPDATE_CONTAINER = "PostUpdateContainer"
    STOP_CONTAINER = "StopContainer"
    REMOVE_CONTAINER = "RemoveContainer"
    STATE_CHANGE = "StateChange"
    VALIDATE_CONTAINER_ADJUSTMENT = "ValidateContainerAdjustment"


class RuntimeMethod(enum.StrEnum):
    """Methods of the Runtime service (the plugin calls them on the runtime)."""

    REGISTER_PLUGIN = "RegisterPlugin"
    UPDATE_CONTAINERS = "UpdateContainers"


__all__ = [
    "HOST_FUNCTIONS_SERVICE",
    "LIVE_STATES",
    "PACKAGE",
    "PLUGIN_SERVICE",
    "RUNTIME_SERVICE",
    "CDIDevice",
    "CompoundFieldOwners",
    "ConfigureRequest",
    "ConfigureResponse",
    "Container",
    "ContainerAdjustment",
    "ContainerEviction",
    "ContainerState",
    "ContainerUpdate",
    "CreateContainerRequest",
    "CreateContainerResponse",
    "Empty",
    "Event",
    "Field",
    "FieldOwners",
    "Hook",
    "Hooks",
    "HugepageLimit",
    "IOPrioClass",
    "Image",
    "KeyValue",
    "LinuxCPU",
    "LinuxContainer",
    "LinuxContainerAdjustment",
    "LinuxContainerUpdate",
    "LinuxDevice",
    "LinuxDeviceCgroup",
    "LinuxIOPriority",
    "LinuxMemory",
    "LinuxMemoryPolicy",
    "LinuxNamespace",
    "LinuxNetDevice",
    "LinuxPids",
    "LinuxPodSandbox",
    "LinuxRdt",
    "LinuxResources",
    "LinuxScheduler",
    "LinuxSchedulerFlag",
    "LinuxSchedulerPolicy",
    "LinuxSeccomp",
    "LinuxSeccompArg",
    "LinuxSyscall",
    "LogRequest",
    "Mount",
    "MpolFlag",
    "MpolMode",
    "OptionalBool",
    "OptionalFileMode",
    "OptionalInt",
    "OptionalInt32",
    "OptionalInt64",
    "OptionalRepeatedString",
    "OptionalString",
    "OptionalUInt32",
    "OptionalUInt64",
    "OwningPlugins",
    "POSIXRlimit",
    "PluginInstance",
    "PluginMethod",
    "PodSandbox",
    "PostCreateContainerRequest",
    "PostCreateContainerResponse",
    "PostStartContainerRequest",
    "PostStartContainerResponse",
    "PostUpdateContainerRequest",
    "PostUpdateContainerResponse",
    "PostUpdatePodSandboxRequest",
    "PostUpdatePodSandboxResponse",
    "RegisterPluginRequest",
    "RemoveContainerRequest",
    "RemoveContainerResponse",
    "RemovePodSandboxRequest",
    "RemovePodSandboxResponse",
    "RunPodSandboxRequest",
    "RunPodSandboxResponse",
    "RuntimeMethod",
    "SecurityProfile",
    "StartContainerRequest",
    "StartContainerResponse",
    "StateChangeEvent",
    "StopContainerRequest",
    "StopContainerResponse",
    "StopPodSandboxRequest",
    "StopPodSandboxResponse",
    "SynchronizeRequest",
    "SynchronizeResponse",
    "UpdateContainerRequest",
    "UpdateContainerResponse",
    "UpdateContainersRequest",
    "UpdateContainersResponse",
    "UpdatePodSandboxRequest",
    "UpdatePodSandboxResponse",
    "User",
    "ValidateContainerAdjustmentRequest",
    "ValidateContainerAdjustmentResponse",
]

"""SGX EPC limits: a container's ``misc.max`` for the SGX encrypted page cache.

Theory of operation: nri-plugins v0.14.0's ``sgx-epc`` plugin (cmd/plugins/sgx-epc) reads
``epc-limit.nri.io`` from the pod's annotations (``.../container.NAME`` over ``.../pod``
over the bare key, the same order as `ContainerInfo.annotation`) and, for a limit above
zero, sets the unified (cgroup v2) ``misc.max`` to ``sgx_epc LIMIT``: the kernel's misc
controller then caps the container's EPC pages.  Here it is a component beside the
policies, switched on by ``control.sgxEpc: {enable: true}`` (their plugin has no
configuration: running it switches it on).  The value travels with memory QoS's unified
values (`nri_resmgr.control.memory`), which every NRI release carries; on a cgroup v1
host runc refuses it, which the controller says as memory QoS does.

Differences from theirs, by design: a value that is not a decimal count of bytes below
2**64 fails the container naming the annotation (theirs: the same, in Go's words).

``control.sgxEpc`` is `nri_resmgr.control.memory_config.SgxEpcConfig`.  Pure: no IO.
"""

from __future__ import annotations

from nri_resmgr.limits import shown
from nri_resmgr.model import AnnotationError, ContainerInfo

__all__ = ["EPC_LIMIT_ANNOTATION", "epc_limit"]

EPC_LIMIT_ANNOTATION = "epc-limit.nri.io"
_UINT64_MAX = (1 << 64) - 1


def epc_limit(container: ContainerInfo) -> int | None:
    """The container's EPC limit in bytes, None for none (absent or 0)."""
    value = container.annotation(EPC_LIMIT_ANNOTATION)
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or not text.isascii() or int(text) > _UINT64_MAX:
        raise AnnotationError(
            f"{container.pretty}: annotation {EPC_LIMIT_ANNOTATION}: expected a byte count "
            f"0..{_UINT64_MAX}, found {shown(value)}"
        )
    return int(text) or None

"""nri-plugins' memory plugin files, taken as this daemon's configuration documents.

Theory of operation: their memory-policy and memory-qos plugins each read a file of their
own (their ``sample-configs/nri-memory-policy.yaml``: top-level ``classes`` and
``injectMpolset``; ``nri-memory-qos.yaml``: ``classes`` and ``unifiedannotations``).
`plugin_section` recognises such a document by its keys (in any case, as their Go reads
them) and names the section of this project's form it is: ``control.memoryPolicy`` or
``control.memoryQos``.  A document whose keys are all theirs is read as

* memory-policy when it has ``injectMpolset``, or a class with a ``policy``;
* memory-qos when it has ``unifiedannotations``, or a class with a ``swaplimitratio``;

and one that has both or neither is refused with what was expected.  The configuration
documents module (`nri_resmgr.policy_documents`) then nests it under that section, so
``validate-config`` and ``run --config`` take their files unchanged.

Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MEMORY_POLICY_SECTION", "MEMORY_QOS_SECTION", "plugin_section"]

MEMORY_POLICY_SECTION = "memoryPolicy"
MEMORY_QOS_SECTION = "memoryQos"

_POLICY_KEYS = frozenset({"classes", "injectmpolset"})
_QOS_KEYS = frozenset({"classes", "unifiedannotations"})


def _class_keys(data: Mapping[Any, Any]) -> set[str]:
    classes = next((v for k, v in data.items() if str(k).lower() == "classes"), None)
    if not isinstance(classes, list):
        return set()
    return {str(k).lower() for c in classes if isinstance(c, Mapping) for k in c}


def plugin_section(data: Mapping[Any, Any]) -> str | None:
    """The ``control`` section a document of their memory plugins is (module docstring):
    `MEMORY_POLICY_SECTION`, `MEMORY_QOS_SECTION`, or None when it is not one of theirs.

    Raises `ValueError` for a document with only their keys that fits both or neither.
    """
    keys = {str(k).lower() for k in data}
    if not keys or not keys <= _POLICY_KEYS | _QOS_KEYS:
        return None
    class_keys = _class_keys(data)
    policy = "injectmpolset" in keys or "policy" in class_keys
    qos = "unifiedannotations" in keys or "swaplimitratio" in class_keys
    if policy != qos:
        return MEMORY_POLICY_SECTION if policy else MEMORY_QOS_SECTION
    found = "both" if policy else "neither"
    raise ValueError(
        "expected nri-plugins' memory-policy file (injectMpolset, classes[].policy) or "
        f"memory-qos file (unifiedannotations, classes[].swaplimitratio), found {found}"
    )

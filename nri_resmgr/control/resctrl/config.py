"""Configuration models: `control.rdt` partitions, classes and options (pydantic).

The values are checked for their syntax here (percent ranges, bitmasks, bandwidth
values, cache id keys, class names); whether the machine can hold them is `plan`'s
question.  Nothing here touches files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from nri_resmgr.control.classes import POD_GROUP_PREFIX, ClassSelection
from nri_resmgr.control.names import validate_name

PERCENT_RE = re.compile(r"(?:(\d+(?:\.\d+)?)-)?(\d+(?:\.\d+)?)%")
MASK_RE = re.compile(r"0[xX][0-9a-fA-F]+")
MB_RE = re.compile(r"(\d+(?:\.\d+)?)(%|MBps)")
#: Widest capacity bitmask any resctrl takes: the kernel parses a CBM as an unsigned long
#: (x86 CPUID reports at most 32 bits).  A machine's own `cbm_mask` is checked at plan time.
MAX_CBM_BITS = 64


def _check_cache_spec(text: str) -> str:
    text = text.strip()
    m = PERCENT_RE.fullmatch(text)
    if m:
        lo = Fraction(m.group(1) or "0")
        hi = Fraction(m.group(2))
        if not 0 <= lo < hi <= 100:
            raise ValueError(f"cache allocation {text!r}: expected 0 <= start < end <= 100 percent")
        return text
    if MASK_RE.fullmatch(text):
        value = int(text, 16)
        if value == 0:
            raise ValueError(f"cache allocation {text!r}: expected a non-zero bitmask")
        if value.bit_length() > MAX_CBM_BITS:
            raise ValueError(
                f"cache allocation {text[:40]!r}: expected a bitmask of at most {MAX_CBM_BITS} "
                f"bits (resctrl's widest); found {value.bit_length()} bits"
            )
        return text.lower()
    raise ValueError(
        f'cache allocation {text!r}: expected a percentage ("50%"), a range ("20-80%") '
        'or a hex bitmask ("0xff0")'
    )


def _check_mb_spec(text: str) -> str:
    text = text.strip()
    m = MB_RE.fullmatch(text)
    if not m or Fraction(m.group(1)) <= 0:
        raise ValueError(f'memory bandwidth {text!r}: expected a positive "N%" or "NMBps"')
    if m.group(2) == "%" and Fraction(m.group(1)) > 100:
        raise ValueError(f"memory bandwidth {text!r}: expected at most 100%")
    return text


def _check_id_key(key: str) -> str:
    if key != "all" and not key.isdigit():
        raise ValueError(f'cache id key {key!r}: expected "all" or a decimal cache id')
    return key


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, alias_generator=to_camel
    )


class CacheEntry(_Model):
    """One cache id's allocation: unified, or code/data under CDP."""

    unified: str | None = None
    code: str | None = None
    data: str | None = None

    @field_validator("unified", "code", "data")
    @classmethod
    def _syntax(cls, value: str | None) -> str | None:
        return None if value is None else _check_cache_spec(value)

    @model_validator(mode="after")
    def _non_empty(self) -> CacheEntry:
        if self.unified is None and self.code is None and self.data is None:
            raise ValueError("cache allocation: expected unified, code or data")
        return self


def _normalize_cache(value: Any) -> Any:
    """`"50%"` | `{unified,code,data}` | `{all: .., "1": ..}` -> `{key: CacheEntry-like}`."""
    if value is None:
        return None
    if isinstance(value, str):
        return {"all": {"unified": value}}
    if isinstance(value, Mapping):
        if set(value) <= {"unified", "code", "data"}:
            return {"all": dict(value)}
        return {str(k): ({"unified": v} if isinstance(v, str) else v) for k, v in value.items()}
    return value


def _normalize_mb(value: Any) -> Any:
    """`"50%"` | `["50%", "2000MBps"]` | `{all: .., "1": ..}` -> `{key: [spec, ...]}`."""
    if value is None:
        return None
    if isinstance(value, str | list | tuple):
        value = {"all": value}
    if not isinstance(value, Mapping):
        raise ValueError(
            'memory bandwidth: expected "N%", "NMBps", a list of them, or a map from cache '
            f"ids to those; found {value!r}"
        )
    out: dict[str, list[object]] = {}
    for key, specs in value.items():
        items = [specs] if isinstance(specs, str) else specs
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ValueError(
                f'memory bandwidth for {key}: expected "N%", "NMBps" or a list of them; '
                f"found {specs!r}"
            )
        out[str(key)] = list(items)
    return out


class Allocation(_Model):
    """What one partition or class gets; unset resources are not restricted."""

    l3_allocation: dict[str, CacheEntry] | None = None
    l2_allocation: dict[str, CacheEntry] | None = None
    mb_allocation: dict[str, tuple[str, ...]] | None = None

    @field_validator("l3_allocation", "l2_allocation", mode="before")
    @classmethod
    def _cache_shape(cls, value: Any) -> Any:
        return _normalize_cache(value)

    @field_validator("mb_allocation", mode="before")
    @classmethod
    def _mb_shape(cls, value: Any) -> Any:
        return _normalize_mb(value)

    @field_validator("l3_allocation", "l2_allocation")
    @classmethod
    def _cache_keys(cls, value: dict[str, CacheEntry] | None) -> dict[str, CacheEntry] | None:
        for key in value or {}:
            _check_id_key(key)
        return value

    @field_validator("mb_allocation")
    @classmethod
    def _mb_values(
        cls, value: dict[str, tuple[str, ...]] | None
    ) -> dict[str, tuple[str, ...]] | None:
        if value is None:
            return None
        out: dict[str, tuple[str, ...]] = {}
        for key, specs in value.items():
            _check_id_key(key)
            if not specs:
                raise ValueError(f"memory bandwidth for {key}: expected at least one value")
            out[key] = tuple(_check_mb_spec(s) for s in specs)
        return out


class ClassDef(Allocation):
    """A class inside a partition."""


class Partition(Allocation):
    classes: dict[str, ClassDef] = Field(default_factory=dict)


class ResourceOption(_Model):
    #: skip this resource silently when the machine lacks it (else ConfigError)
    optional: bool = False


class RdtOptions(_Model):
    l3: ResourceOption = Field(default_factory=ResourceOption)
    l2: ResourceOption = Field(default_factory=ResourceOption)
    mb: ResourceOption = Field(default_factory=ResourceOption)


class RdtConfig(ClassSelection):
    """`control.rdt`: class selection (enable, ...) plus partitions, classes and options."""

    partitions: dict[str, Partition] = Field(default_factory=dict)
    options: RdtOptions = Field(default_factory=RdtOptions)
    #: create `mon_groups/nri-resmgr-pod-<uid>` per pod (see RdtController.ensure_mon_group)
    monitor_pods: bool = False
    #: how a pod's monitoring group is named: ``nri-resmgr`` (`nri-resmgr-pod-<uid>`), or
    #: ``pod-uid`` (the canonical pod UID alone, as nri-plugins' resctrl-mon names it and
    #: Kepler reads it: `[<class>/]mon_groups/<pod-uid>`)
    monitor_group_names: Literal["nri-resmgr", "pod-uid"] = "nri-resmgr"
    #: resctrl-mon's ``namespaces``: monitor only pods in these namespaces (empty: all)
    monitor_namespaces: tuple[str, ...] = ()
    #: resctrl-mon's ``labelSelector``: monitor only pods with all these labels (empty: all)
    monitor_label_selector: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _class_names(self) -> RdtConfig:
        seen: dict[str, str] = {}
        for pname, part in self.partitions.items():
            for cname in part.classes:
                where = f"control.rdt.partitions.{pname}.classes.{cname}"
                validate_name(cname, subject=where, error=ValueError)
                if cname.startswith(POD_GROUP_PREFIX):
                    raise ValueError(
                        f"{where}: expected a name not starting with {POD_GROUP_PREFIX!r} "
                        "(reserved for pod groups)"
                    )
                if cname in seen:
                    raise ValueError(
                        f"{where}: expected class names unique across partitions; "
                        f"found it also in partition {seen[cname]}"
                    )
                seen[cname] = pname
        return self

    def monitors(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod in `namespace` with `labels` is monitored (``monitorNamespaces``
        and ``monitorLabelSelector``, as resctrl-mon's ``shouldMonitorPod`` filters)."""
        if self.monitor_namespaces and namespace not in self.monitor_namespaces:
            return False
        return all(labels.get(k) == v for k, v in self.monitor_label_selector.items())

    def class_names(self) -> tuple[str, ...]:
        return tuple(c for p in self.partitions.values() for c in p.classes)

"""nri-plugins' expressions over a container: one rule for every policy that reads them.

Theory of operation: an expression (``{key, operator, values}``) looks a *key* up on a
container and tests the value with an *operator*.  Both the topology-aware policy's
affinity annotations and the balloons policy's ``matchExpressions`` and ``groupBy``
references are expressions; this module is their one definition (nri-plugins keeps
one too, ``pkg/resmgr/expression.go``).

- *Keys* are paths, normalized by dropping empty segments (``/pod//name`` is
  ``pod/name``): ``name``, ``namespace``, ``qosclass``, ``id`` and ``labels/L`` /
  ``tags/L`` on the container, ``pod/name``, ``pod/namespace``, ``pod/qosclass``,
  ``pod/id``, ``pod/uid``, ``pod/labels/L`` on its pod.  Container labels and tags are
  not in NRI's view of a container: such keys are valid and never found.
- A *joint key* ``:K1:K2`` (or ``:<ksep><vsep>K1<ksep>K2``, when both separators are
  neither alphanumeric nor ``/`` or ``.``) is the values of its keys joined by the value
  separator; it is found when any of them is, the missing ones counting as "".
- *Operators*: ``Equals``/``NotEqual`` and ``In``/``NotIn`` (a value ``*`` equals
  anything found), ``Matches``/``MatchesNot`` and ``MatchesAny``/``MatchesNone``
  (shell-style globs), ``Exists``/``NotExist``, ``AlwaysTrue``.  The negative forms are
  true when the key is not found.  `ONE_VALUE` and `NO_VALUE` say how many values an
  operator takes (`check_values`).

A container is evaluated as its `Subject` (`subject_of`): every key it has, normalized,
to its value, built once per container and asked many times.  The label keys it makes
(``pod/labels/app``) are interned: every container of a node holds the same few.

**Indexes.**  A policy that weighs an expression against every live container (the
topology-aware affinity rules) may keep its containers indexed by (key, value) for the
keys that group containers (`Subject.grouping`: not the ids, which each container has
its own, nor ``pod/namespace`` and ``pod/qosclass``, whose values are always those of
``namespace`` and ``qosclass``: a test of one is looked up under the other).
`Expression.lookup_terms` gives the index entries whose union is exactly the containers
an ``Equals`` or ``In`` test can be true for, or None when the index cannot answer
(another operator, a joint key, the ``*`` value, an id key): then every container is
tested.
"""

from __future__ import annotations

import enum
import fnmatch
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nri_resmgr.limits import shown
from nri_resmgr.model import ContainerInfo

__all__ = [
    "NO_VALUE",
    "ONE_VALUE",
    "Expression",
    "Operator",
    "Subject",
    "check_key",
    "check_values",
    "expand",
    "split_keys",
    "subject_of",
]


class Operator(enum.StrEnum):
    EQUALS = "Equals"
    NOT_EQUAL = "NotEqual"
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    NOT_EXIST = "NotExist"
    ALWAYS_TRUE = "AlwaysTrue"
    MATCHES = "Matches"
    MATCHES_NOT = "MatchesNot"
    MATCHES_ANY = "MatchesAny"
    MATCHES_NONE = "MatchesNone"


#: operators that take exactly one value, and those that take none
ONE_VALUE = frozenset({Operator.EQUALS, Operator.NOT_EQUAL, Operator.MATCHES, Operator.MATCHES_NOT})
NO_VALUE = frozenset({Operator.EXISTS, Operator.NOT_EXIST, Operator.ALWAYS_TRUE})
_PLAIN_KEYS = {"name", "namespace", "qosclass", "id", "uid"}
#: keys whose value is the container's or pod's own: not worth an index entry each
_ID_KEYS = frozenset({"id", "pod/id", "pod/uid"})
#: keys whose value is always another key's (a container's namespace and QoS class are
#: its pod's): indexed under that key only
_SAME_AS = {"pod/namespace": "namespace", "pod/qosclass": "qosclass"}
_UNINDEXED = _ID_KEYS | _SAME_AS.keys()


@dataclass(frozen=True, slots=True)
class Subject:
    """What an expression can ask about one container."""

    id: str
    name: str
    namespace: str
    qos_class: str
    pod_id: str
    pod_uid: str
    pod_name: str
    pod_labels: tuple[tuple[str, str], ...] = ()

    #: every key this subject has, normalized (``pod/labels/app``), to its value
    _index: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {
            "name": self.name,
            "namespace": self.namespace,
            "qosclass": self.qos_class,
            "id": self.id,
            "pod/name": self.pod_name,
            "pod/namespace": self.namespace,
            "pod/qosclass": self.qos_class,
            "pod/id": self.pod_id,
            "pod/uid": self.pod_uid,
        }
        index.update((sys.intern(f"pod/labels/{k}"), v) for k, v in self.pod_labels)
        object.__setattr__(self, "_index", index)

    def lookup(self, key: str) -> str | None:
        """The value of one normalized (non-joint) key, or None when there is none."""
        return self._index.get(key)

    def grouping(self) -> list[tuple[str, str]]:
        """Every (key, value) of this subject but the ids and the keys that repeat
        another's value (module docstring, "Indexes")."""
        return [(k, v) for k, v in self._index.items() if k not in _UNINDEXED]


def subject_of(container: ContainerInfo) -> Subject:
    """`container` as expressions see it."""
    pod = container.pod
    return Subject(
        id=str(container.id),
        name=container.name,
        namespace=pod.namespace,
        qos_class=str(pod.qos_class),
        pod_id=str(pod.id),
        pod_uid=pod.uid,
        pod_name=pod.name,
        pod_labels=tuple(sorted(pod.labels.items())),
    )


def _separator(ch: str) -> bool:
    return not (ch.isalnum() or ch in "/.")


def split_keys(key: str) -> tuple[list[str], str]:
    """The keys of `key` (one unless joint) and the joint value separator ("" if not)."""
    if len(key) < 4 or key[0] != ":":
        return [key], ""
    rest = key[1:]
    ksep, vsep = rest[0], rest[1]
    if _separator(ksep) and _separator(vsep):
        rest = rest[2:]
    else:
        ksep = vsep = ":"
    return rest.split(ksep), vsep


def _normalized(key: str) -> str:
    return "/".join(p for p in key.split("/") if p)


@dataclass(frozen=True, slots=True)
class Expression:
    """One ``{key, operator, values}`` test of a `Subject`."""

    key: str
    op: Operator
    values: tuple[str, ...] = ()
    #: `key` split into its (joint) keys, each normalized, and the joint value separator
    _parts: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _vsep: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys, vsep = split_keys(self.key)
        object.__setattr__(self, "_parts", tuple(_normalized(k) for k in keys))
        object.__setattr__(self, "_vsep", vsep)

    def value_of(self, subject: Subject) -> str | None:
        """The value of this expression's key on `subject`, None when not found."""
        if len(self._parts) == 1:
            return subject.lookup(self._parts[0])
        found = [subject.lookup(k) for k in self._parts]
        if all(v is None for v in found):
            return None
        return self._vsep.join(v or "" for v in found)

    def lookup_terms(self) -> tuple[tuple[str, str], ...] | None:
        """The (key, value) index entries holding every subject this expression is true
        for, or None when an index cannot tell (module docstring, "Indexes")."""
        if self.op not in (Operator.EQUALS, Operator.IN) or len(self._parts) != 1:
            return None
        key = self._parts[0]
        if key in _ID_KEYS or "*" in self.values:
            return None
        key = _SAME_AS.get(key, key)
        return tuple((key, v) for v in self.values)

    def evaluate(self, subject: Subject) -> bool:
        op = self.op
        if op is Operator.ALWAYS_TRUE:
            return True
        value = self.value_of(subject)
        if op is Operator.EXISTS:
            return value is not None
        if op is Operator.NOT_EXIST:
            return value is None
        first = self.values[0] if self.values else ""
        if op is Operator.EQUALS:
            return value is not None and first in (value, "*")
        if op is Operator.NOT_EQUAL:
            return value is None or value != first
        if op in (Operator.IN, Operator.NOT_IN):
            hit = value is not None and any(v in (value, "*") for v in self.values)
            return hit if op is Operator.IN else not hit
        if op in (Operator.MATCHES, Operator.MATCHES_NOT):
            hit = value is not None and fnmatch.fnmatchcase(value, first)
            return hit if op is Operator.MATCHES else not hit
        hit = value is not None and any(fnmatch.fnmatchcase(value, p) for p in self.values)
        return hit if op is Operator.MATCHES_ANY else not hit


def check_values(op: Operator, values: Sequence[str], *, where: str) -> None:
    """`ValueError` naming `where` unless `op` takes as many values as `values` has."""
    if op in ONE_VALUE and len(values) != 1:
        raise ValueError(f"{where}: {op} takes exactly one value, found {len(values)}")
    if op in NO_VALUE and values:
        raise ValueError(f"{where}: {op} takes no values, found {len(values)}")


def check_key(key: str, *, where: str) -> None:
    """`ValueError` naming `where` and `key` unless every part of `key` is a known key."""
    keys, _ = split_keys(key)
    for k in keys:
        parts = k.strip("/").split("/")
        head = parts[0]
        if head == "pod":
            parts = parts[1:]
            head = parts[0] if parts else ""
            if not head:
                raise ValueError(
                    f'{where}: key {shown(key)}: expected a pod field after "pod/", found none'
                )
        if head in ("labels", "tags"):
            if len(parts) < 2 or not parts[1]:
                raise ValueError(
                    f'{where}: key {shown(key)}: expected a label after "{head}/", found none'
                )
            continue
        if head not in _PLAIN_KEYS or len(parts) != 1:
            raise ValueError(
                f"{where}: unknown key {shown(key)}; expected name, namespace, qosclass, id, "
                "labels/L, pod/name, pod/namespace, pod/qosclass, pod/id, pod/uid, "
                "pod/labels/L"
            )


_REF = re.compile(r"\$\{([^}]*)\}|\$([A-Za-z0-9_/.:-]+)")


def expand(template: str, subject: Subject) -> str:
    """`template` with its ``${key}`` (or ``$key``) references replaced by their values
    ("" where not found)."""

    def value(m: re.Match[str]) -> str:
        return Expression(m.group(1) or m.group(2), Operator.EXISTS).value_of(subject) or ""

    return _REF.sub(value, template)

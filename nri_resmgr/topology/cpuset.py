"""Sets of CPU and NUMA node ids, and the kernel's list format.

Theory of operation: the kernel writes CPU and node sets as comma-separated ids and
inclusive ranges (``0-3,8,10-11``); cgroups, sysfs and NRI all use that form.  `IDSet`
is an immutable, hashable set of non-negative ints that parses and formats it in exactly
one place.  `CPUSet` and `NodeSet` are the same type under the names the rest of the
code uses, so a reader can tell which kind of id a value holds.

Parsing is bounded where the text enters: no id above `max_id` (default `MAX_ID`, the
largest CPU id a Linux kernel can be built for) is accepted, so a hostile ``0-4294967295``
costs one comparison, not four billion set insertions.  Every bad element of a list is
reported, not only the first: `IDSetError.problems` holds one message per element.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeAlias

#: The largest id accepted by default: Linux's CONFIG_NR_CPUS tops out at 8192 (x86_64
#: MAXSMP), so id 8191 is the highest a real CPU can have.
MAX_ID = 8191


class IDSetError(ValueError):
    """A string is not a valid kernel id list.

    `problems` lists each bad element's message; `str()` of the error joins them.
    """

    def __init__(self, message: str, problems: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) or (message,)


class IDSet:
    """An immutable set of non-negative ids in the kernel's ``0-3,8`` list form."""

    __slots__ = ("_ids", "_text")
    _ids: frozenset[int]
    #: the list form, made on the first str(): a pool's cpuset is rendered into every
    #: update and log line of its containers (226 times for one exclusive grant)
    _text: str

    def __init__(self, ids: Iterable[int] = ()) -> None:
        frozen = frozenset(ids)
        for i in frozen:
            if not isinstance(i, int) or isinstance(i, bool) or i < 0:
                raise IDSetError(f"id set: expected non-negative integers, found {i!r}")
        object.__setattr__(self, "_ids", frozen)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> tuple[type[IDSet], tuple[tuple[int, ...]]]:
        return (IDSet, (tuple(sorted(self._ids)),))

    @classmethod
    def parse(cls, text: str, *, max_id: int = MAX_ID) -> IDSet:
        """Parse the kernel list form; the empty string (or whitespace) is the empty set.

        Raises `IDSetError` naming every bad element, and any id above `max_id`.
        """
        ids: set[int] = set()
        text = text.strip()
        if not text:
            return cls()
        shown = text if len(text) <= 64 else text[:61] + "..."
        problems: list[str] = []
        ranges: list[tuple[int, int]] = []
        for part in text.split(","):
            part = part.strip()
            problem = _element_problem(part, max_id)
            if isinstance(problem, str):
                problems.append(problem)
            else:
                ranges.append(problem)
        if problems:
            raise IDSetError(
                f"id list {shown!r}: " + "; ".join(problems),
                (f"id list {shown!r}: {p}" for p in problems),
            )
        for lo, hi in ranges:
            ids.update(range(lo, hi + 1))
        return _valid(frozenset(ids))

    def __str__(self) -> str:
        if not self._ids:  # most grants' exclusive CPUs; not worth the AttributeError
            return ""
        try:
            return self._text
        except AttributeError:
            text = self._list_form()
            object.__setattr__(self, "_text", text)
            return text

    def _list_form(self) -> str:
        out: list[str] = []
        start = prev = -2
        for i in sorted(self._ids):
            if i == prev + 1:
                prev = i
                continue
            if start >= 0:
                out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
        if start >= 0:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
        return ",".join(out)

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self}')"

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._ids))

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, item: object) -> bool:
        return item in self._ids

    def __bool__(self) -> bool:
        return bool(self._ids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IDSet):
            return self._ids == other._ids
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._ids)

    def __or__(self, other: IDSet) -> IDSet:
        return _valid(self._ids | other._ids)

    def __and__(self, other: IDSet) -> IDSet:
        return _valid(self._ids & other._ids)

    def __sub__(self, other: IDSet) -> IDSet:
        return _valid(self._ids - other._ids)

    def __le__(self, other: IDSet) -> bool:
        return self._ids <= other._ids

    def __lt__(self, other: IDSet) -> bool:
        return self._ids < other._ids

    def isdisjoint(self, other: IDSet) -> bool:
        return self._ids.isdisjoint(other._ids)

    def ids(self) -> frozenset[int]:
        return self._ids

    def sorted(self) -> list[int]:
        return sorted(self._ids)

    def first(self, n: int) -> IDSet:
        """The n lowest ids."""
        return _valid(frozenset(sorted(self._ids)[:n]))


CPUSet: TypeAlias = IDSet
NodeSet: TypeAlias = IDSet


def union(sets: Iterable[IDSet]) -> IDSet:
    """The union of any number of id sets."""
    out: set[int] = set()
    for s in sets:
        out |= s.ids()
    return _valid(frozenset(out))


def _valid(ids: frozenset[int]) -> IDSet:
    """An IDSet of ids taken from other IDSets (or parsed and bounded): already checked,
    so not checked again one by one (a Synchronize of 1,000 containers makes 40,000 sets)."""
    out = object.__new__(IDSet)
    object.__setattr__(out, "_ids", ids)
    return out


def _element_problem(part: str, max_id: int) -> tuple[int, int] | str:
    """One element of an id list as an inclusive range, or what is wrong with it."""
    if not part:
        return "empty element; expected e.g. '0-3,8'"
    shown = part if len(part) <= 32 else part[:29] + "..."
    lo_s, sep, hi_s = part.partition("-")
    if not (_is_decimal(lo_s) and (not sep or _is_decimal(hi_s))):
        return f"element {shown!r} is not an id or a range; expected e.g. '0-3,8'"
    if len(lo_s.strip()) > 12 or len(hi_s.strip()) > 12:
        return f"element {shown!r} has an id above {max_id}, the largest accepted"
    lo = int(lo_s, 10)
    hi = int(hi_s, 10) if sep else lo
    if hi < lo:
        return f"range {shown!r} is empty (it ends before it starts)"
    if hi > max_id:
        return f"element {shown!r} has an id above {max_id}, the largest accepted"
    return (lo, hi)


def _is_decimal(text: str) -> bool:
    """ASCII digits only (int() also takes other scripts' digits and underscores)."""
    text = text.strip()
    return text.isascii() and text.isdigit()

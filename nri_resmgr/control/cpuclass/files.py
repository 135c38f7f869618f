"""The CPU class files: reads what `plan` needs under a sysfs root, and writes its plan.

Theory of operation: `CPUClassFiles` is the one holder of the *originals* (each file's
value before the first write to it) for the daemon's life, across reconfigurations.
`apply(use, classes)` reads what each managed CPU offers (`read_facts`: package, die,
``cpuinfo_min_freq``, ``base_frequency``, ``cpuinfo_max_freq``, the cpuidle state names;
once per CPU), the current contents of the files `plan.desired_values` wants and of
those it wrote before, and writes `plan.plan_writes`' writes in order.  `restore()` puts
every original back (shutdown).

A missing file (a machine without cpufreq, a driver without EPP, no
``intel_uncore_frequency``) or a failed write is one warning naming the file and what
was wanted, logged once per file and value; the rest goes on.  Every write is one log
line (file, value, class).  Paths are under ``ROOT/sys/devices/system/cpu``.

With a `record` file (the daemon's ``STATE_DIR/cpuclass-originals.json``) the originals
survive a crash: they are saved (atomically) whenever they change and read back at
start, so the next daemon restores what was there before the first one wrote.  A record
of another root is ignored; an entry that is not a class file and value
(`plan.is_class_file`) is skipped with a warning, never written; a record that cannot be
written is one warning (the originals are then in memory only).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from nri_resmgr.control.cpuclass.plan import (
    CPUFacts,
    Write,
    desired_values,
    is_class_file,
    paths_to_read,
    plan_writes,
    undefined_classes,
)
from nri_resmgr.ops.logs import EventLog, get_logger
from nri_resmgr.policy.cpu_classes import CPUClassSettings, CPUClassUse

__all__ = ["RECORD_NAME", "CPUClassFiles", "read_facts"]

#: the record of originals in the daemon's state directory
RECORD_NAME = "cpuclass-originals.json"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def read_facts(cpu_dir: Path, cpu: int) -> CPUFacts | None:
    """What `cpu` offers, from ``cpu_dir/cpuN`` (None: no such CPU directory)."""
    d = cpu_dir / f"cpu{cpu}"
    if not d.is_dir():
        return None
    states: list[tuple[int, str]] = []
    idle = d / "cpuidle"
    if idle.is_dir():
        for s in idle.iterdir():
            index = s.name.removeprefix("state")
            name = _read(s / "name")
            if s.name.startswith("state") and index.isdigit() and name is not None:
                states.append((int(index), name))
    freq = d / "cpufreq"
    return CPUFacts(
        cpu=cpu,
        package=_read_int(d / "topology" / "physical_package_id") or 0,
        die=_read_int(d / "topology" / "die_id") or 0,
        min_khz=_read_int(freq / "cpuinfo_min_freq"),
        base_khz=_read_int(freq / "base_frequency"),
        max_khz=_read_int(freq / "cpuinfo_max_freq"),
        cstates=tuple(sorted(states)),
    )


class CPUClassFiles:
    """CPU class settings written under `root` (module docstring)."""

    def __init__(
        self, root: str | Path, *, record: Path | None = None, log: EventLog | None = None
    ) -> None:
        self.cpu_dir = Path(root) / "sys" / "devices" / "system" / "cpu"
        if log is None:
            log = get_logger("cpuclass")
        self.log: EventLog = log
        self.record = record
        self._facts: dict[int, CPUFacts | None] = {}
        #: warnings already given (each once)
        self._warned: set[str] = set()
        #: path (relative to `cpu_dir`) -> its value before our first write
        self.originals: dict[str, str] = self._load()

    def _load(self) -> dict[str, str]:
        if self.record is None:
            return {}
        try:
            doc = json.loads(self.record.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as exc:
            self._warn_once("cpu class record unreadable, ignored", record=str(self.record),
                            error=str(exc))  # fmt: skip
            return {}
        entries = doc.get("originals") if isinstance(doc, dict) else None
        if not isinstance(entries, dict) or doc.get("root") != str(self.cpu_dir):
            return {}  # not ours, or another root's
        out: dict[str, str] = {}
        for path, value in entries.items():
            if isinstance(path, str) and isinstance(value, str) and is_class_file(path, value):
                out[path] = value
            else:
                self._warn_once("cpu class record entry skipped", entry=repr(path)[:120])
        return out

    def _save(self, before: Mapping[str, str]) -> None:
        if self.record is None or self.originals == before:
            return
        tmp = self.record.with_suffix(".tmp")
        try:
            if not self.originals:
                self.record.unlink(missing_ok=True)
                return
            self.record.parent.mkdir(parents=True, exist_ok=True)
            doc = {"root": str(self.cpu_dir), "originals": dict(sorted(self.originals.items()))}
            tmp.write_text(json.dumps(doc, indent=1))
            os.replace(tmp, self.record)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._warn_once(
                "cpu class record not writable: originals kept in memory only",
                record=str(self.record),
                error=exc.strerror or str(exc),
            )

    def _warn_once(self, message: str, **kw: object) -> None:
        key = message + repr(sorted(kw.items()))
        if key not in self._warned:
            self._warned.add(key)
            self.log.warning(message, **kw)

    def facts(self, cpu: int) -> CPUFacts | None:
        if cpu not in self._facts:
            self._facts[cpu] = read_facts(self.cpu_dir, cpu)
        return self._facts[cpu]

    def _current(self, paths: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for p in paths:
            v = _read(self.cpu_dir / p)
            if v is not None:
                out[p] = v
        return out

    def _write(self, writes: tuple[Write, ...]) -> list[Write]:
        done: list[Write] = []
        for w in writes:
            path = self.cpu_dir / w.path
            try:
                path.write_text(w.value)
            except OSError as exc:
                self._warn_once(
                    "cpu class file not written",
                    file=str(path),
                    value=w.value,
                    cpu_class=w.cls,
                    error=exc.strerror or str(exc),
                )
                continue
            self.log.info("cpu class write", file=str(path), value=w.value, cpu_class=w.cls)
            done.append(w)
        return done

    def apply(self, use: CPUClassUse, classes: Mapping[str, CPUClassSettings]) -> list[Write]:
        """Set the files of `use`'s CPUs to their classes (`classes`: name -> settings);
        restore those no longer wanted.  The writes made."""
        if not classes and not self.originals:
            for p in undefined_classes(use, classes):
                self._warn_once(p)
            return []  # nothing defined and nothing to undo: not a single read
        facts = {c: f for c in use.managed if (f := self.facts(c)) is not None}
        desired, problems = desired_values(use, classes, facts)
        for p in problems:
            self._warn_once(p)
        current = self._current(paths_to_read(desired, self.originals))
        plan = plan_writes(desired, current, self.originals)
        for p in plan.missing:
            self._warn_once(
                "cpu class file missing: not set",
                file=str(self.cpu_dir / p),
                value=desired[p].value,
                cpu_class=desired[p].cls,
            )
        # recorded before writing (the new originals and those being restored), so that
        # a crash mid-way still knows every original; then without the restored ones
        before, self.originals = self.originals, {**self.originals, **plan.originals}
        self._save(before)
        done = self._write(plan.writes)
        before, self.originals = self.originals, dict(plan.originals)
        self._save(before)
        return done

    def restore(self) -> list[Write]:
        """Every file written back to its original; the writes made."""
        plan = plan_writes({}, self._current(sorted(self.originals)), self.originals)
        done = self._write(plan.writes)
        before, self.originals = self.originals, {}
        self._save(before)
        return done

"""CPU class files on a synthetic sysfs tree: written, read back, restored; missing files."""

from __future__ import annotations

import json
from pathlib import Path

from nri_resmgr.control.cpuclass.files import RECORD_NAME, CPUClassFiles
from nri_resmgr.control.cpuclass.synthetic import CPUFreqLayout, write_cpu_class_tree
from nri_resmgr.control.host_reset import restore_cpu_class_files
from nri_resmgr.policy.cpu_classes import CPUClassSettings, CPUClassUse
from nri_resmgr.topology.cpuset import IDSet
from nri_resmgr.topology.synthetic import build_topology, write_sysfs


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, object]]] = []

    def debug(self, event: str, **kw: object) -> None:
        self.lines.append(("debug", event, kw))

    def info(self, event: str, **kw: object) -> None:
        self.lines.append(("info", event, kw))

    def warning(self, event: str, **kw: object) -> None:
        self.lines.append(("warning", event, kw))

    def exception(self, event: str, **kw: object) -> None:
        self.lines.append(("error", event, kw))

    def warnings(self) -> list[tuple[str, dict[str, object]]]:
        return [(e, kw) for level, e, kw in self.lines if level == "warning"]


SPEC = {"packages": 2, "cores": 2, "threads": 2}


def tree(root: Path, layout: CPUFreqLayout | None = None) -> Path:
    topo = write_sysfs(build_topology(SPEC), root)
    return write_cpu_class_tree(root, topo, layout or CPUFreqLayout())


def read(cpu_dir: Path, rel: str) -> str:
    return (cpu_dir / rel).read_text().strip()


def snapshot(cpu_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(cpu_dir)): p.read_text() for p in cpu_dir.rglob("*") if p.is_file()}


CLASSES: dict[str, CPUClassSettings] = {
    "fast": CPUClassSettings.model_validate(
        {"minFreq": "turbo", "maxFreq": "turbo", "freqGovernor": "performance",
         "energyPerformancePreference": 0, "disabledCstates": ["C4", "C8"],
         "uncoreMinFreq": "2GHz", "uncoreMaxFreq": "2.4GHz"}
    ),
    "idle": CPUClassSettings.model_validate({"maxFreq": "base", "disabledCstates": []}),
}  # fmt: skip


def use(**cpus: str) -> CPUClassUse:
    return CPUClassUse(
        cpus={k: IDSet.parse(v) for k, v in cpus.items()}, managed=IDSet.parse("1-7")
    )


def test_apply_writes_class_values_and_restores_them(tmp_path: Path) -> None:
    cpu_dir = tree(tmp_path)
    start = snapshot(cpu_dir)
    log = Log()
    files = CPUClassFiles(tmp_path, log=log)
    files.apply(use(fast="1,5", idle="2-4,6-7"), CLASSES)  # fast: package 0 only
    assert read(cpu_dir, "cpu1/cpufreq/scaling_min_freq") == "3800000"
    assert read(cpu_dir, "cpu5/cpufreq/scaling_governor") == "performance"
    assert read(cpu_dir, "cpu5/cpufreq/energy_performance_preference") == "0"
    assert [read(cpu_dir, f"cpu1/cpuidle/state{i}/disable") for i in range(5)] == [
        "0", "0", "0", "1", "1",
    ]  # fmt: skip
    assert read(cpu_dir, "cpu6/cpufreq/scaling_max_freq") == "2900000"
    assert read(cpu_dir, "intel_uncore_frequency/package_00_die_00/min_freq_khz") == "2000000"
    assert read(cpu_dir, "intel_uncore_frequency/package_01_die_00/min_freq_khz") == "800000"
    assert read(cpu_dir, "cpu0/cpufreq/scaling_max_freq") == "3800000"  # not managed
    writes = [kw for level, e, kw in log.lines if e == "cpu class write"]
    assert {"file": str(cpu_dir / "cpu1/cpuidle/state3/disable"), "value": "1",
            "cpu_class": "fast"} in writes  # fmt: skip
    # the balloon deflates: cpu5 goes back to idle; cpu5's C4/C8 come back
    files.apply(use(fast="1", idle="2-7"), CLASSES)
    assert read(cpu_dir, "cpu5/cpuidle/state3/disable") == "0"
    assert read(cpu_dir, "cpu5/cpufreq/scaling_governor") == "powersave"  # original
    assert read(cpu_dir, "cpu5/cpufreq/scaling_min_freq") == "800000"
    # nothing changed: nothing written
    n = len(log.lines)
    files.apply(use(fast="1", idle="2-7"), CLASSES)
    assert len(log.lines) == n
    files.restore()
    assert {k: v.strip() for k, v in snapshot(cpu_dir).items()} == {
        k: v.strip() for k, v in start.items()
    }
    assert files.originals == {}


def test_missing_files_are_named_once_and_the_rest_is_set(tmp_path: Path) -> None:
    cpu_dir = tree(tmp_path, CPUFreqLayout(epp=None, uncore=None, base_khz=None))
    log = Log()
    files = CPUClassFiles(tmp_path, log=log)
    for _ in range(2):
        files.apply(use(fast="1", idle="2"), CLASSES)
    warned = log.warnings()
    epp = str(cpu_dir / "cpu1/cpufreq/energy_performance_preference")
    uncore = str(cpu_dir / "intel_uncore_frequency/package_00_die_00/min_freq_khz")
    files_named = [kw.get("file") for _, kw in warned]
    assert files_named.count(epp) == 1
    assert uncore in files_named
    assert (
        "CPU class 'idle': cpu2: base frequency unknown (its cpufreq file is missing); not set",
        {},
    ) in warned
    assert read(cpu_dir, "cpu1/cpufreq/scaling_max_freq") == "3800000"
    assert read(cpu_dir, "cpu1/cpuidle/state4/disable") == "1"


def test_machine_without_cpufreq_or_cpuidle_gives_warnings_not_errors(tmp_path: Path) -> None:
    write_sysfs(build_topology(SPEC), tmp_path)  # topology only: like this VM
    log = Log()
    assert CPUClassFiles(tmp_path, log=log).apply(use(fast="1"), CLASSES) == []
    events = [e for e, _ in log.warnings()]
    assert (
        "CPU class 'fast': cpu1: turbo frequency unknown (its cpufreq file is missing); "
        "not set" in events
    )
    assert any(
        kw.get("file") == str(tmp_path / "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor")
        for _, kw in log.warnings()
    )


def test_nothing_defined_reads_nothing_and_names_the_undefined_class(tmp_path: Path) -> None:
    log = Log()
    files = CPUClassFiles(tmp_path / "absent", log=log)
    assert files.apply(use(fast="1"), {}) == []
    assert files.apply(use(fast="1"), {}) == []
    assert log.warnings() == [
        (
            "CPU class 'fast' (CPUs 1) is defined in neither cpuClasses nor "
            "control.cpu.classes; its CPUs are left as they were",
            {},
        )
    ]


def test_a_failed_write_is_a_warning(tmp_path: Path) -> None:
    cpu_dir = tree(tmp_path)
    target = cpu_dir / "cpu1/cpufreq/scaling_governor"
    target.unlink()
    target.symlink_to("/proc/version")  # readable, and a write fails (EIO), even as root
    log = Log()
    files = CPUClassFiles(tmp_path, log=log)
    files.apply(use(fast="1"), CLASSES)
    assert read(cpu_dir, "cpu1/cpufreq/scaling_min_freq") == "3800000"  # the rest goes on
    (event, kw), *_ = [(e, kw) for e, kw in log.warnings() if kw.get("file") == str(target)]
    assert (event, kw["value"], kw["cpu_class"]) == (
        "cpu class file not written",
        "performance",
        "fast",
    )


def test_originals_survive_a_crash_through_the_record(tmp_path: Path) -> None:
    cpu_dir = tree(tmp_path / "root")
    start = {k: v.strip() for k, v in snapshot(cpu_dir).items()}
    record = tmp_path / "state" / "cpuclass-originals.json"
    first = CPUClassFiles(tmp_path / "root", record=record, log=Log())
    first.apply(use(fast="1,5", idle="2-4,6-7"), CLASSES)
    assert record.exists()
    # the daemon dies (no restore); the next one takes over from the record
    second = CPUClassFiles(tmp_path / "root", record=record, log=Log())
    assert second.originals == first.originals
    second.apply(use(fast="1", idle="2-7"), CLASSES)
    second.restore()
    assert {k: v.strip() for k, v in snapshot(cpu_dir).items()} == start
    assert not record.exists()  # nothing left to restore


def test_a_tampered_record_is_never_written_from(tmp_path: Path) -> None:
    cpu_dir = tree(tmp_path / "root")
    record = tmp_path / "cpuclass-originals.json"
    record.write_text(
        json.dumps(
            {
                "root": str(cpu_dir),
                "originals": {
                    "../../../../etc/motd": "pwned",
                    "cpu1/cpufreq/scaling_governor": "a\nb",
                    "cpu1/cpufreq/scaling_max_freq": "3800000",
                },
            }
        )
    )
    log = Log()
    files = CPUClassFiles(tmp_path / "root", record=record, log=log)
    assert files.originals == {"cpu1/cpufreq/scaling_max_freq": "3800000"}
    assert [e for e, _ in log.warnings()] == ["cpu class record entry skipped"] * 2
    # another root's record is not this daemon's
    other = CPUClassFiles(tmp_path / "elsewhere", record=record, log=Log())
    assert other.originals == {}


def test_reset_puts_back_what_a_crashed_daemon_left(tmp_path: Path) -> None:
    root, state = tmp_path / "root", tmp_path / "state"
    cpu_dir = tree(root)
    start = {k: v.strip() for k, v in snapshot(cpu_dir).items()}
    assert restore_cpu_class_files(sysfs_root=root, state_dir=state) == []  # no record
    files = CPUClassFiles(root, record=state / RECORD_NAME, log=Log())
    files.apply(use(fast="1"), CLASSES)  # and the daemon dies
    planned = restore_cpu_class_files(sysfs_root=root, state_dir=state, dry_run=True)
    assert "cpu1/cpufreq/scaling_min_freq" in planned
    assert {k: v.strip() for k, v in snapshot(cpu_dir).items()} != start
    restored = restore_cpu_class_files(sysfs_root=root, state_dir=state)
    assert "cpu1/cpufreq/scaling_min_freq" in restored
    assert {k: v.strip() for k, v in snapshot(cpu_dir).items()} == start
    assert not (state / RECORD_NAME).exists()

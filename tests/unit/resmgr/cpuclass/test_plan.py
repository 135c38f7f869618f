"""The CPU class planner: desired file values, turbo priority, the writes and restores."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_resmgr.control.cpuclass.plan import (
    RESTORE,
    CPUFacts,
    Setting,
    Write,
    desired_values,
    plan_writes,
)
from nri_resmgr.policy.cpu_classes import CPUClassSettings, CPUClassUse, TurboDomain
from nri_resmgr.topology.cpuset import IDSet

CSTATES = ((0, "POLL"), (1, "C1E"), (2, "C4"), (3, "C8"))


def facts(n: int = 8, *, per_package: int = 4) -> dict[int, CPUFacts]:
    return {
        c: CPUFacts(
            cpu=c,
            package=c // per_package,
            min_khz=800_000,
            base_khz=2_900_000,
            max_khz=3_800_000,
            cstates=CSTATES,
        )
        for c in range(n)
    }


def settings_of(**kw: object) -> CPUClassSettings:
    return CPUClassSettings.model_validate(kw)


def use(cpus: Mapping[str, str], managed: str = "0-7", **kw: object) -> CPUClassUse:
    return CPUClassUse(
        cpus={k: IDSet.parse(v) for k, v in cpus.items()},
        managed=IDSet.parse(managed),
        **kw,  # type: ignore[arg-type]
    )


def values(desired: Mapping[str, Setting]) -> dict[str, str]:
    return {p: s.value for p, s in desired.items()}


def test_frequencies_governor_epp_and_cstates() -> None:
    classes = {
        "fast": settings_of(
            minFreq="2GHz", maxFreq="turbo", freqGovernor="performance",
            energyPerformancePreference=0, disabledCstates=["C4", "C8", "C10"],
        ),
        "idle": settings_of(maxFreq="base", disabledCstates=[]),
    }  # fmt: skip
    got, problems = desired_values(use({"fast": "1", "idle": "2"}), classes, facts())
    assert problems == []
    assert values(got) == {
        "cpu1/cpufreq/scaling_min_freq": "2000000",
        "cpu1/cpufreq/scaling_max_freq": "3800000",
        "cpu1/cpufreq/scaling_governor": "performance",
        "cpu1/cpufreq/energy_performance_preference": "0",
        "cpu1/cpuidle/state0/disable": "0",
        "cpu1/cpuidle/state1/disable": "0",
        "cpu1/cpuidle/state2/disable": "1",
        "cpu1/cpuidle/state3/disable": "1",
        "cpu2/cpufreq/scaling_max_freq": "2900000",
        "cpu2/cpuidle/state0/disable": "0",
        "cpu2/cpuidle/state1/disable": "0",
        "cpu2/cpuidle/state2/disable": "0",
        "cpu2/cpuidle/state3/disable": "0",
    }
    assert got["cpu1/cpufreq/scaling_min_freq"].cls == "fast"


def test_cpus_outside_managed_and_unknown_classes_are_left_alone() -> None:
    classes = {"c": settings_of(maxFreq="1GHz")}
    got, problems = desired_values(use({"c": "0-3", "nope": "5"}, "2-7"), classes, facts())
    assert set(values(got)) == {"cpu2/cpufreq/scaling_max_freq", "cpu3/cpufreq/scaling_max_freq"}
    assert problems == [
        "CPU class 'nope' (CPUs 5) is defined in neither cpuClasses nor control.cpu.classes; "
        "its CPUs are left as they were"
    ]


def test_symbolic_frequency_without_its_file_is_a_problem() -> None:
    f = {0: CPUFacts(cpu=0, min_khz=800_000)}
    got, problems = desired_values(
        use({"c": "0"}), {"c": settings_of(minFreq="min", maxFreq="base")}, f
    )
    assert values(got) == {"cpu0/cpufreq/scaling_min_freq": "800000"}
    assert problems == [
        "CPU class 'c': cpu0: base frequency unknown (its cpufreq file is missing); not set"
    ]


TURBO = {
    "high": settings_of(minFreq="turbo", maxFreq="turbo", turboPriority=10),
    "low": settings_of(minFreq="turbo", maxFreq="turbo", turboPriority=1),
    "default": settings_of(minFreq="min", maxFreq="turbo"),
}


def max_of(got: Mapping[str, Setting], cpu: int) -> str:
    return got[f"cpu{cpu}/cpufreq/scaling_max_freq"].value


def test_turbo_goes_to_the_highest_priority_class_per_package() -> None:
    # their test18: with no turboPriority class active, "turbo" is turbo for everyone
    got, _ = desired_values(use({"default": "0-7"}), TURBO, facts())
    assert {max_of(got, c) for c in range(8)} == {"3800000"}
    # turbo-low active in package 0: default there drops to base, package 1 keeps turbo
    got, _ = desired_values(use({"low": "1", "default": "0,2-7"}), TURBO, facts())
    assert max_of(got, 1) == "3800000"
    assert max_of(got, 0) == "2900000"
    assert max_of(got, 5) == "3800000"
    # turbo-high in package 0 wins over turbo-low there
    got, _ = desired_values(use({"high": "2", "low": "1", "default": "0,3-7"}), TURBO, facts())
    assert (max_of(got, 2), max_of(got, 1)) == ("3800000", "2900000")
    assert got["cpu1/cpufreq/scaling_min_freq"].value == "2900000"
    # turboDomain system: one winner for the machine
    got, _ = desired_values(
        use({"high": "2", "default": "0-1,3-7"}, turbo_domain=TurboDomain.SYSTEM), TURBO, facts()
    )
    assert max_of(got, 2) == "3800000"
    assert max_of(got, 5) == "2900000"


def test_uncore_takes_the_highest_class_value_on_each_die() -> None:
    classes = {
        "a": settings_of(uncoreMinFreq=1_000_000, uncoreMaxFreq=2_000_000),
        "b": settings_of(uncoreMinFreq=1_200_000),
        "c": settings_of(),
    }
    got, _ = desired_values(use({"a": "0", "b": "1", "c": "4-7"}), classes, facts())
    assert values(got) == {
        "intel_uncore_frequency/package_00_die_00/min_freq_khz": "1200000",
        "intel_uncore_frequency/package_00_die_00/max_freq_khz": "2000000",
    }
    assert got["intel_uncore_frequency/package_00_die_00/min_freq_khz"].cls == "b"


def test_writes_only_differences_and_restores_originals() -> None:
    want = {"cpu0/x": Setting("1", "c"), "cpu0/y": Setting("2", "c")}
    plan = plan_writes(want, {"cpu0/x": "1", "cpu0/y": "0"}, {})
    assert plan.writes == (Write("cpu0/y", "2", "c"),)
    assert plan.originals == {"cpu0/x": "1", "cpu0/y": "0"}
    # the CPU leaves its class: y gets its original back, x was never changed
    plan = plan_writes({}, {"cpu0/x": "1", "cpu0/y": "2"}, plan.originals)
    assert plan.writes == (Write("cpu0/y", "0", RESTORE),)
    assert plan.originals == {}


def test_missing_files_are_named_not_written() -> None:
    plan = plan_writes({"cpu0/cpufreq/energy_performance_preference": Setting("0", "c")}, {}, {})
    assert plan.writes == ()
    assert plan.missing == ("cpu0/cpufreq/energy_performance_preference",)


def test_min_and_max_are_ordered_to_stay_consistent() -> None:
    cur = {"cpu0/cpufreq/scaling_min_freq": "800", "cpu0/cpufreq/scaling_max_freq": "1000"}
    up = {"cpu0/cpufreq/scaling_min_freq": Setting("2000", "c"),
          "cpu0/cpufreq/scaling_max_freq": Setting("3000", "c")}  # fmt: skip
    assert [w.path.rsplit("/")[-1] for w in plan_writes(up, cur, {}).writes] == [
        "scaling_max_freq",
        "scaling_min_freq",
    ]
    cur = {"cpu0/cpufreq/scaling_min_freq": "2000", "cpu0/cpufreq/scaling_max_freq": "3000"}
    down = {"cpu0/cpufreq/scaling_min_freq": Setting("800", "c"),
            "cpu0/cpufreq/scaling_max_freq": Setting("1000", "c")}  # fmt: skip
    assert [w.path.rsplit("/")[-1] for w in plan_writes(down, cur, {}).writes] == [
        "scaling_min_freq",
        "scaling_max_freq",
    ]


# ---- properties: random class uses applied in sequence to a simulated file tree ----

CLASSES = {
    "a": settings_of(minFreq="2GHz", maxFreq="3GHz", disabledCstates=["C4"], freqGovernor="x"),
    "b": settings_of(minFreq="min", maxFreq="base", energyPerformancePreference=128),
    "c": settings_of(minFreq="turbo", maxFreq="turbo", turboPriority=2, uncoreMaxFreq=2000),
    "d": settings_of(disabledCstates=[], uncoreMinFreq=1000, uncoreMaxFreq=1500),
}
FACTS = facts(6, per_package=3)


def initial_tree() -> dict[str, str]:
    tree: dict[str, str] = {}
    for c in FACTS:
        tree[f"cpu{c}/cpufreq/scaling_min_freq"] = "800000"
        tree[f"cpu{c}/cpufreq/scaling_max_freq"] = "3800000"
        tree[f"cpu{c}/cpufreq/scaling_governor"] = "powersave"
        tree[f"cpu{c}/cpufreq/energy_performance_preference"] = "balance_power"
        for i, _ in CSTATES:
            tree[f"cpu{c}/cpuidle/state{i}/disable"] = "0"
    for p in range(2):
        tree[f"intel_uncore_frequency/package_{p:02d}_die_00/min_freq_khz"] = "800"
        tree[f"intel_uncore_frequency/package_{p:02d}_die_00/max_freq_khz"] = "2400"
    return tree


uses = st.lists(
    st.dictionaries(st.integers(0, 5), st.sampled_from(sorted(CLASSES))),
    min_size=1,
    max_size=6,
)


def as_use(assign: Mapping[int, str]) -> CPUClassUse:
    by_class: dict[str, IDSet] = {}
    for cpu, name in assign.items():
        by_class[name] = by_class.get(name, IDSet()) | IDSet([cpu])
    return CPUClassUse(cpus=by_class, managed=IDSet(range(6)))


def apply(tree: dict[str, str], writes: tuple[Write, ...]) -> None:
    for w in writes:
        head, _, leaf = w.path.rpartition("/")
        tree[w.path] = w.value
        for low, high in (
            ("scaling_min_freq", "scaling_max_freq"),
            ("min_freq_khz", "max_freq_khz"),
        ):
            if leaf in (low, high):  # the kernel refuses min > max
                assert int(tree[f"{head}/{low}"]) <= int(tree[f"{head}/{high}"]), w


@settings(max_examples=150, deadline=None)
@given(uses)
def test_props_writes_reach_desired_then_restore_reaches_the_start(
    sequence: list[dict[int, str]],
) -> None:
    start = initial_tree()
    tree = dict(start)
    originals: Mapping[str, str] = {}
    for assign in sequence:
        desired, problems = desired_values(as_use(assign), CLASSES, FACTS)
        assert problems == []
        plan = plan_writes(desired, tree, originals)
        apply(tree, plan.writes)
        # every desired file holds its value, every other file its value at the start
        for path, value in tree.items():
            assert value == (desired[path].value if path in desired else start[path]), path
        # minimal: planning again writes nothing
        assert plan_writes(desired, tree, plan.originals).writes == ()
        # only changed files were written, each once
        assert len({w.path for w in plan.writes}) == len(plan.writes)
        originals = plan.originals
        assert all(start[p] == v for p, v in originals.items())
    plan = plan_writes({}, tree, originals)
    apply(tree, plan.writes)
    assert tree == start
    assert plan.originals == {}

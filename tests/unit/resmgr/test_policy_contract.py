"""The policy contract: every optional hook has its default, and one record registers a policy."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from nri_resmgr.model import (
    Assignment,
    ConfigError,
    ContainerID,
    ContainerInfo,
    CPUKind,
    Decision,
    PolicyState,
)
from nri_resmgr.ops.metrics import balloon_snapshots
from nri_resmgr.policy.base import Policy, PolicyRecord
from nri_resmgr.policy.cpu_classes import NO_CPU_CLASSES
from nri_resmgr.policy.irq_affinity import NO_IRQ_USE
from nri_resmgr.policy.none import NonePolicy
from nri_resmgr.policy.pool_report import PoolCPUs
from nri_resmgr.policy_registry import ENTRY_POINT_GROUP, available_policies, load_policy
from nri_resmgr.policy_registry import _load as load_entry_point
from nri_resmgr.topology.cpuset import IDSet
from tests.support.builders import small
from tests.support.requirements import REPO


class Bare(Policy[PolicyState]):
    """The five methods and nothing else."""

    name = "bare"

    def initial_state(self) -> PolicyState:
        return PolicyState()

    def allocate(self, state: PolicyState, container: ContainerInfo) -> Decision[PolicyState]:
        return Decision(state)

    def release(self, state: PolicyState, container_id: ContainerID) -> Decision[PolicyState]:
        return Decision(state)

    def update(self, state: PolicyState, container: ContainerInfo) -> Decision[PolicyState]:
        return Decision(state)

    def rebuild(self, containers: Sequence[ContainerInfo]) -> Decision[PolicyState]:
        return Decision(PolicyState())


def test_a_policy_without_a_hook_gets_its_default() -> None:
    p = Bare(topology=small(), config={})
    s = p.initial_state()
    assert p.render(s) is None
    assert p.cpu_class_use(s) is NO_CPU_CLASSES
    assert p.irq_use(s) is NO_IRQ_USE
    assert p.scheduling.nri_requirements() == ()
    assert p.balloons(s) == ()
    p.check(s)  # nothing to check: no error
    assert balloon_snapshots(p, s) == ()
    assert p.pool_cpus(s, ()) == PoolCPUs()


def test_the_default_pool_cpus_are_what_the_assignments_show() -> None:
    p = Bare(topology=small(), config={})

    def held(cid: str, cpus: set[int], kind: CPUKind, pool: str = "") -> Assignment:
        return Assignment(ContainerID(cid), IDSet(cpus), IDSet({0}), kind, pool=pool)

    pools = p.pool_cpus(
        p.initial_state(),
        [
            held("r", {0}, CPUKind.RESERVED),
            held("s1", {2, 3}, CPUKind.SHARED, "socket #0"),
            held("s2", {3, 4}, CPUKind.SHARED, "socket #0"),
            held("s3", {5}, CPUKind.SHARED),
            held("x", {6}, CPUKind.EXCLUSIVE, "socket #0"),
        ],
    )
    assert pools == PoolCPUs(
        reserved=IDSet({0}),
        shared={"socket #0": IDSet({2, 3, 4}), "shared": IDSet({5})},
    )


def test_the_default_constructor_takes_no_configuration() -> None:
    with pytest.raises(
        ConfigError, match=r"policy bare: unknown configuration key 'x'; expected none$"
    ):
        Bare(topology=small(), config={"x": 1})


def test_a_policy_without_a_protocol_method_cannot_be_built() -> None:
    class Half(Policy[PolicyState]):
        name = "half"

        def initial_state(self) -> PolicyState:
            return PolicyState()

    with pytest.raises(TypeError, match="allocate"):
        Half(topology=small(), config={})  # type: ignore[abstract]


def test_the_record_carries_the_name_and_builds() -> None:
    record = PolicyRecord(NonePolicy)
    assert record.name == "none" and record.spec_keys() == frozenset()
    assert isinstance(record.build(topology=small(), config={}), NonePolicy)


def test_every_built_in_is_registered_by_its_record() -> None:
    records = {name: src.load() for name, src in available_policies().items()}
    assert {"balloons", "none", "static", "topology-aware"} <= set(records)
    for name, record in records.items():
        assert isinstance(record, PolicyRecord) and record.name == name
    kinds = {n: r.resource.kind for n, r in records.items() if r.resource is not None}
    assert kinds == {"balloons": "BalloonsPolicy", "topology-aware": "TopologyAwarePolicy"}


def test_pyproject_names_the_records() -> None:
    text = (REPO / "pyproject.toml").read_text()
    section = text.split(f'[project.entry-points."{ENTRY_POINT_GROUP}"]\n')[1].split("\n\n")[0]
    assert all(line.endswith(':RECORD"') for line in section.splitlines()), section


def test_an_entry_point_naming_a_class_finds_its_modules_record() -> None:
    # metadata written before records: the value names the class
    ep = EntryPoint(
        name="topology-aware",
        value="nri_resmgr.policy.topology_aware:TopologyAwarePolicy",
        group=ENTRY_POINT_GROUP,
    )
    record = load_entry_point(ep)
    assert record.spec_model is not None and record.resource is not None
    bad = EntryPoint(name="x", value="nri_resmgr.model:ConfigError", group=ENTRY_POINT_GROUP)
    with pytest.raises(ConfigError, match="expected a PolicyRecord or a Policy subclass"):
        load_entry_point(bad)


def test_a_drop_in_with_a_record_and_its_class_is_one_policy(tmp_path: Path) -> None:
    spread = (REPO / "plugins.d" / "example_spread.py").read_text()
    (tmp_path / "spread.py").write_text(
        spread + "\n\nfrom nri_resmgr.policy.base import PolicyRecord\n"
        "RECORD = PolicyRecord(SpreadPolicy)\n"
    )
    found = available_policies([tmp_path])
    assert found["spread"].origin.endswith("spread.py")
    assert isinstance(
        load_policy("spread", topology=small(), config={}, plugin_dirs=[tmp_path]), Policy
    )


def test_a_drop_in_importing_a_built_in_does_not_define_it_again(tmp_path: Path) -> None:
    (tmp_path / "uses.py").write_text(
        "from nri_resmgr.policy.static import RECORD, StaticPolicy\n"
        "class Mine(StaticPolicy):\n"
        "    name = 'mine'\n"
    )
    found = available_policies([tmp_path])
    assert found["static"].origin.startswith("entry point")
    assert found["mine"].origin.endswith("uses.py")


#: every method of the contract, the optional hooks among them
HOOKS = frozenset(
    name for name, value in vars(Policy).items() if callable(value) and not name.startswith("_")
)


def _getattr_on_a_policy(tree: ast.AST) -> list[int]:
    """Lines of a ``getattr``/``hasattr`` on something named a policy, or of one that
    looks up a contract method by its name on anything (``getattr(p, "render")``)."""
    found = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
        ):
            continue
        attr = node.args[1] if len(node.args) > 1 else None
        by_name = isinstance(attr, ast.Constant) and attr.value in HOOKS
        if by_name or "policy" in ast.unparse(node.args[0]).lower():
            found.append(node.lineno)
    return found


def test_no_hook_is_looked_up_with_getattr() -> None:
    found = {
        str(path.relative_to(REPO)): lines
        for path in sorted((REPO / "nri_resmgr").rglob("*.py"))
        if (lines := _getattr_on_a_policy(ast.parse(path.read_text())))
    }
    assert found == {}
    assert _getattr_on_a_policy(ast.parse('getattr(self.policy, "render", None)')) == [1]
    assert _getattr_on_a_policy(ast.parse('hasattr(p, "irq_use")\ngetattr(p, "x")')) == [1]
    assert {"render", "cpu_class_use", "irq_use", "balloons", "record", "restore"} <= HOOKS

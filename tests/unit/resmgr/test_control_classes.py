"""select_classes: annotation over pod group over QoS class over default."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from nri_resmgr.control.classes import (
    ClassChoice,
    ClassConfig,
    pod_group_name,
    select_classes,
)
from nri_resmgr.model import (
    AnnotationError,
    ConfigError,
    ContainerID,
    ContainerInfo,
    Pod,
    PodID,
    QoSClass,
    Request,
)

UID = "0f3b4c1e-1111-2222-3333-444455556666"
KNOWN_RDT = ("gold", "silver", "BestEffort")
KNOWN_BLKIO = ("slowdisk", "Guaranteed")


def container(
    annotations: Mapping[str, str] = {},
    *,
    qos: QoSClass = QoSClass.BEST_EFFORT,
    name: str = "app",
) -> ContainerInfo:
    pod = Pod(
        id=PodID("sandbox-1"),
        uid=UID,
        name="web-0",
        namespace="default",
        qos_class=qos,
        annotations=dict(annotations),
    )
    return ContainerInfo(id=ContainerID("c1"), name=name, pod=pod, request=Request())


def config(**kw: object) -> ClassConfig:
    return ClassConfig.model_validate(kw)


ON = {"enable": True}
ON_QOS = {"enable": True, "usePodQoSAsDefaultClass": True}


def choose(c: ContainerInfo, cfg: ClassConfig) -> ClassChoice:
    return select_classes(c, cfg, known_rdt=KNOWN_RDT, known_blockio=KNOWN_BLKIO)


@pytest.mark.parametrize(
    ("annotations", "cfg", "qos", "expected"),
    [
        pytest.param({}, {}, QoSClass.BEST_EFFORT, ClassChoice(None, None), id="disabled"),
        pytest.param(
            {"rdtclass.resource-policy.nri.io/pod": "gold"},
            {},
            QoSClass.BEST_EFFORT,
            ClassChoice(None, None),
            id="disabled-ignores-annotation",
        ),
        pytest.param({}, {"rdt": ON, "blockio": ON}, QoSClass.BEST_EFFORT,
                     ClassChoice(None, None), id="enabled-nothing-applies"),
        pytest.param({}, {"rdt": ON_QOS, "blockio": ON_QOS}, QoSClass.BEST_EFFORT,
                     ClassChoice("BestEffort", None), id="qos-known-for-rdt-only"),
        pytest.param({}, {"rdt": ON_QOS, "blockio": ON_QOS}, QoSClass.GUARANTEED,
                     ClassChoice(None, "Guaranteed"), id="qos-known-for-blockio-only"),
        pytest.param({}, {"rdt": {**ON_QOS, "defaultClass": "silver"}}, QoSClass.BURSTABLE,
                     ClassChoice("silver", None), id="qos-unknown-falls-to-default"),
        pytest.param(
            {"rdtclass.resource-policy.nri.io/pod": "silver",
             "rdtclass.resource-policy.nri.io/container.app": "gold",
             "blockioclass.resource-policy.nri.io": "slowdisk"},
            {"rdt": ON_QOS, "blockio": ON_QOS}, QoSClass.BEST_EFFORT,
            ClassChoice("gold", "slowdisk"), id="container-annotation-wins"),
        pytest.param(
            {"rdtclass.resource-policy.nri.io/pod": "silver",
             "rdtclass.resource-policy.nri.io/container.other": "gold"},
            {"rdt": ON}, QoSClass.BEST_EFFORT,
            ClassChoice("silver", None), id="other-container-annotation-ignored"),
        pytest.param(
            {"node.koordinator.sh/resctrl": '{"llc":{"schemata":{"range":[0,50]}}}'},
            {"rdt": ON_QOS}, QoSClass.BEST_EFFORT,
            ClassChoice("nri-resmgr-pod-" + UID, None), id="pod-group-over-qos"),
        pytest.param(
            {"node.koordinator.sh/resctrl": "{}",
             "rdtclass.resource-policy.nri.io": "gold"},
            {"rdt": ON}, QoSClass.BEST_EFFORT,
            ClassChoice("gold", None), id="explicit-annotation-over-pod-group"),
        pytest.param(
            {"node.koordinator.sh/resctrl": "{}"},
            {"blockio": ON}, QoSClass.BEST_EFFORT,
            ClassChoice(None, None), id="pod-group-needs-rdt-enabled"),
    ],
)
def test_selection_order(
    annotations: dict[str, str],
    cfg: dict[str, object],
    qos: QoSClass,
    expected: ClassChoice,
) -> None:
    assert choose(container(annotations, qos=qos), config(**cfg)) == expected


def test_unknown_class_names_annotation_and_lists_known() -> None:
    c = container({"rdtclass.resource-policy.nri.io/container.app": "platinum"})
    with pytest.raises(AnnotationError) as info:
        choose(c, config(rdt=ON))
    assert str(info.value) == (
        "pod default/web-0 container app: annotation "
        "rdtclass.resource-policy.nri.io/container.app names unknown RDT class "
        "'platinum'; expected one of BestEffort, gold, silver"
    )


def test_unknown_blockio_class_with_no_classes_configured() -> None:
    c = container({"blockioclass.resource-policy.nri.io/pod": "fast"})
    with pytest.raises(AnnotationError) as info:
        select_classes(c, config(blockio=ON), known_rdt=(), known_blockio=())
    assert str(info.value).endswith(
        "annotation blockioclass.resource-policy.nri.io/pod names unknown block I/O class "
        "'fast'; expected one of (none configured)"
    )


@pytest.mark.parametrize("value", ["../gold", "/abs", ".hidden", "info", "a/b", "g\u043eld",
                                   "x" * 300, "a\x00"])
def test_hostile_annotation_values_rejected(value: str) -> None:
    c = container({"rdtclass.resource-policy.nri.io/pod": value})
    with pytest.raises(AnnotationError, match=r"^pod default/web-0 container app: annotation "
                       r"rdtclass\.resource-policy\.nri\.io/pod: expected 1-64 characters"):
        choose(c, config(rdt=ON))


def test_default_class_must_be_known() -> None:
    with pytest.raises(ConfigError) as info:
        choose(container(), config(rdt={"enable": True, "defaultClass": "bronze"}))
    assert str(info.value) == (
        "control.rdt.defaultClass: expected one of the configured RDT classes "
        "BestEffort, gold, silver; found 'bronze'"
    )


def test_default_class_name_validated_in_config() -> None:
    with pytest.raises(ValueError, match="defaultClass: expected 1-64 characters"):
        config(rdt={"enable": True, "defaultClass": "../x"})


def test_config_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="usePodQosAsDefault"):
        config(rdt={"usePodQosAsDefault": True})


def test_pod_group_name_rejects_hostile_uid() -> None:
    pod = container().pod
    bad = Pod(id=pod.id, uid="../../etc", name=pod.name, namespace=pod.namespace,
              qos_class=pod.qos_class)
    with pytest.raises(AnnotationError, match=r"uid '\.\./\.\./etc' as a resctrl group name"):
        pod_group_name(bad)

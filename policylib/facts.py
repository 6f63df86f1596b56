"""Cluster facts a policy may read, passed in as plain data.

The CLI builds them from the objects in its input, the webhook from a
watch-backed cache; the policies see only this interface.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .constants import (
    APPS_GROUP,
    AUTOSCALING_GROUP,
    HYPERNODE_API_VERSION,
    LWS_GROUP,
    NATIVE_GANG_API_VERSIONS,
    SIGS_PODGROUP_API_VERSION,
    TRAINER_API_VERSION,
    VOLCANO_PODGROUP_API_VERSION,
    X_K8S_PODGROUP_API_VERSION,
)
from .workload_api import WorkloadApi

DEFAULT_NAMESPACE = "default"


def namespace_of(obj: dict[str, Any], default: str = DEFAULT_NAMESPACE) -> str:
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    return namespace if isinstance(namespace, str) and namespace else default


def is_hpa(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "HorizontalPodAutoscaler" and \
        str(obj.get("apiVersion", "")).startswith(f"{AUTOSCALING_GROUP}/")


#: The kinds whose HPA counts in their spread (rules S2, A2, E2), and the API groups their ``scaleTargetRef``
#: may name (a Deployment's also the old ``extensions``; a LeaderWorkerSet's its own group).
SCALED_KINDS: dict[str, tuple[str, ...]] = {"Deployment": (f"{APPS_GROUP}/", "extensions/"),
                                            "StatefulSet": (f"{APPS_GROUP}/",),
                                            "LeaderWorkerSet": (f"{LWS_GROUP}/",)}


def scale_target_name(kind: str, name: str) -> str:
    """The name an HPA index keys a scale target by (rules S2, A2): a Deployment's own name, any other kind's
    ``Kind/name`` (an object name holds no ``/``, so the two never collide)."""
    return name if kind == "Deployment" else f"{kind}/{name}"


def scale_target_of(index_name: str) -> tuple[str, str]:
    """``(kind, name)`` of an index name :func:`scale_target_name` made."""
    kind, _, name = index_name.rpartition("/")
    return (kind or "Deployment", name)


def hpa_target(hpa: dict[str, Any]) -> tuple[str, str] | None:
    """``(namespace, index name)`` of the Deployment or StatefulSet an HPA scales (:func:`scale_target_name`),
    or None if it scales something else.

    ``scaleTargetRef`` is the same in autoscaling/v1 and v2; its apiVersion is
    optional and, when given, must be in the ``apps`` group.
    """
    spec = hpa.get("spec")
    ref = spec.get("scaleTargetRef") if isinstance(spec, dict) else None
    if not isinstance(ref, dict) or ref.get("kind") not in SCALED_KINDS or not ref.get("name"):
        return None
    api_version = ref.get("apiVersion")
    if api_version and not str(api_version).startswith(SCALED_KINDS[ref["kind"]]):
        return None
    return namespace_of(hpa), scale_target_name(ref["kind"], str(ref["name"]))


def hpa_targets(hpa: dict[str, Any]) -> list[tuple[str, str]]:
    """The Deployment or StatefulSet an HPA targets, as an index value of an HPA store (none when it targets
    something else): the admission server's facts and the controller's HPA store index HPAs by it."""
    target = hpa_target(hpa)
    return [target] if target else []


PODGROUP_API_VERSIONS = (X_K8S_PODGROUP_API_VERSION, SIGS_PODGROUP_API_VERSION, VOLCANO_PODGROUP_API_VERSION)


def is_podgroup(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("kind") == "PodGroup" and obj.get("apiVersion") in PODGROUP_API_VERSIONS




#: Kubeflow Trainer's two runtime kinds: a TrainJob's ``spec.runtimeRef`` names one (rule T1).
TRAINING_RUNTIME, CLUSTER_TRAINING_RUNTIME = "TrainingRuntime", "ClusterTrainingRuntime"


def is_training_runtime(obj: object) -> bool:
    """A ``trainer.kubeflow.org/v1alpha1`` TrainingRuntime or ClusterTrainingRuntime."""
    return isinstance(obj, dict) and obj.get("apiVersion") == TRAINER_API_VERSION and \
        obj.get("kind") in (TRAINING_RUNTIME, CLUSTER_TRAINING_RUNTIME)


def is_hypernode(obj: object) -> bool:
    """A Volcano ``topology.volcano.sh/v1alpha1`` HyperNode (rule V26)."""
    return isinstance(obj, dict) and obj.get("kind") == "HyperNode" and obj.get("apiVersion") == HYPERNODE_API_VERSION


def is_native_gang_object(obj: object) -> bool:
    """A ``scheduling.k8s.io`` Workload or PodGroup of a version policylib writes (``v1beta1``, ``v1alpha2``):
    Kubernetes' own gang objects (gang method workload, rule G18)."""
    return isinstance(obj, dict) and obj.get("apiVersion") in NATIVE_GANG_API_VERSIONS \
        and obj.get("kind") in ("Workload", "PodGroup")


@dataclass
class ClusterFacts:
    """HorizontalPodAutoscalers indexed by the Deployment they target, Nodes, Volcano HyperNodes,
    PodGroups indexed by (apiVersion, namespace, name), Kubernetes' own Workloads and PodGroups, and the
    Workload API version the cluster takes (rule G22; None: decided from the config alone, Kubernetes 1.37
    assumed)."""

    hpas: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    podgroups: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    #: scheduling.k8s.io Workloads and PodGroups by (apiVersion, kind, namespace, name).
    native: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    #: What the cluster serves of the Workload API (the webhook's and the controller's discovery,
    #: ``--kube-version``, ``--cluster``); None: not known.
    workload_api: WorkloadApi | None = None
    #: Volcano HyperNode objects of the input or the cluster (rule V26).
    hypernodes: list[dict[str, Any]] = field(default_factory=list)
    #: Kubeflow Trainer's TrainingRuntimes and ClusterTrainingRuntimes by (kind, namespace ("" for a cluster one),
    #: name): what a TrainJob's gang is computed from (rule T1).
    runtimes: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, objects: Iterable[dict[str, Any]]) -> "ClusterFacts":
        facts = cls()
        for obj in objects:
            facts.add(obj)
        return facts

    def add(self, obj: dict[str, Any]) -> bool:
        """Index ``obj`` if it is a fact; returns whether it was one."""
        if is_hpa(obj):
            target = hpa_target(obj)
            if target:
                self.hpas.setdefault(target, []).append(obj)
            return True
        if isinstance(obj, dict) and obj.get("kind") == "Node" and obj.get("apiVersion") == "v1":
            self.nodes.append(obj)
            return True
        if is_hypernode(obj):
            self.hypernodes.append(obj)
            return True
        if is_podgroup(obj):
            meta = obj.get("metadata") or {}
            self.podgroups[(obj["apiVersion"], namespace_of(obj), meta.get("name", ""))] = obj
            return True
        if is_native_gang_object(obj):
            key = (obj["apiVersion"], obj["kind"], namespace_of(obj), (obj.get("metadata") or {}).get("name", ""))
            self.native[key] = obj
            return True
        if is_training_runtime(obj):
            meta = obj.get("metadata") or {}
            ns = "" if obj["kind"] == CLUSTER_TRAINING_RUNTIME else str(meta.get("namespace") or "default")
            self.runtimes[(obj["kind"], ns, str(meta.get("name", "")))] = obj
            return True
        return False

    def runtime(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Rule T1: the TrainingRuntime ``namespace/name`` or the ClusterTrainingRuntime ``name``, or None."""
        return self.runtimes.get((kind, "" if kind == CLUSTER_TRAINING_RUNTIME else namespace, name))

    def hpas_for(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return self.hpas.get((namespace, name), [])

    def podgroup(self, api_version: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.podgroups.get((api_version, namespace, name))

    def native_gang_object(self, kind: str, namespace: str, name: str,
                           api_version: str | None = None) -> dict[str, Any] | None:
        """The scheduling.k8s.io ``kind`` (Workload or PodGroup) ``namespace/name`` in ``api_version`` (None: in
        any version policylib writes, the newest first), or None."""
        versions = (api_version,) if api_version else NATIVE_GANG_API_VERSIONS
        return next((self.native[(v, kind, namespace, name)] for v in versions
                     if (v, kind, namespace, name) in self.native), None)


NO_FACTS = ClusterFacts()


def is_fact(obj: object) -> bool:
    """Objects that inform policies and are not themselves mutated or printed."""
    return is_hpa(obj) or is_podgroup(obj) or is_native_gang_object(obj) or is_hypernode(obj) or is_training_runtime(obj) or \
        (isinstance(obj, dict) and obj.get("kind") == "Node" and obj.get("apiVersion") == "v1")

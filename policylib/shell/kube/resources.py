"""The resources policylib reads and writes: where each lives on the API server, what its objects are called,
and the registry that finds one by apiVersion and kind."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...constants import (
    ADMISSIONREGISTRATION_GROUP,
    APPS_GROUP,
    AUTOSCALING_GROUP,
    COORDINATION_GROUP,
    EVENTS_GROUP,
    HYPERNODE_GROUP,
    JOBSET_GROUP,
    JOBSET_VERSION,
    KUBEFLOW_GROUP,
    KUBEFLOW_VERSION,
    MPI_V2_VERSION,
    NATIVE_GANG_GROUP,
    NATIVE_GANG_V1ALPHA2,
    NATIVE_GANG_V1BETA1,
    NATIVE_GANG_VERSIONS,
    POD_TEMPLATE_HASH,
    SIGS_GROUP,
    STATEFULSET_POD_NAME,
    TRAINER_GROUP,
    TRAINER_VERSION,
    VOLCANO_PODGROUP_VERSION,
    VOLCANO_SCHEDULING_GROUP,
    X_K8S_GROUP,
)


@dataclass(frozen=True)
class Resource:
    """An API resource: where it lives and what its objects are called."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    #: A ``fieldSelector`` every list and watch carries (``metadata.name=X``: RBAC may then name the object).
    field_selector: str = ""
    #: A ``labelSelector`` every list and watch carries (the controller's pod watch, rule S27).
    label_selector: str = ""
    #: Lists ask for the objects' metadata only (``PartialObjectMetadataList``, as kubectl and controller-runtime's
    #: metadata clients do): what is counted by name, namespace, labels and owner, never read whole.
    metadata_only: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace and self.namespaced:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


def typed(res: Resource, obj: Any) -> Any:
    """``obj`` as read from ``res``, its ``apiVersion`` and ``kind`` filled in where the server left them out (list
    items omit them)."""
    if isinstance(obj, dict) and obj.get("metadata") is not None:
        obj.setdefault("apiVersion", res.api_version)
        obj.setdefault("kind", res.kind)
    return obj


DEPLOYMENTS = Resource(APPS_GROUP, "v1", "deployments", "Deployment")
#: StatefulSets: the spread's second kind (rules A1-A6).
STATEFULSETS = Resource(APPS_GROUP, "v1", "statefulsets", "StatefulSet")
#: Rules A7, A8: a StatefulSet's claims and the PersistentVolumes bound to them (``check`` and ``simulate --cluster``).
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
HPAS = Resource(AUTOSCALING_GROUP, "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
TFJOBS = Resource(KUBEFLOW_GROUP, KUBEFLOW_VERSION, "tfjobs", "TFJob")
PYTORCHJOBS = Resource(KUBEFLOW_GROUP, KUBEFLOW_VERSION, "pytorchjobs", "PyTorchJob")
MPIJOBS = Resource(KUBEFLOW_GROUP, KUBEFLOW_VERSION, "mpijobs", "MPIJob")
#: The MPI Operator's API; a cluster serves mpijobs.kubeflow.org from one operator or the other.
MPIJOBS_V2 = Resource(KUBEFLOW_GROUP, MPI_V2_VERSION, "mpijobs", "MPIJob")
KUBEFLOW_JOBS = (TFJOBS, PYTORCHJOBS, MPIJOBS, MPIJOBS_V2)
JOBSETS = Resource(JOBSET_GROUP, JOBSET_VERSION, "jobsets", "JobSet")
TRAINJOBS = Resource(TRAINER_GROUP, TRAINER_VERSION, "trainjobs", "TrainJob")
#: The kinds whose gangs policylib writes and whose PodGroups (or Workloads) the controller makes (rules G5, G18, J3,
#: T3).
GANG_JOBS = KUBEFLOW_JOBS + (JOBSETS, TRAINJOBS)
PODGROUPS = (Resource(X_K8S_GROUP, "v1alpha1", "podgroups", "PodGroup"),
             Resource(SIGS_GROUP, "v1alpha1", "podgroups", "PodGroup"))


def native_gang_resources(version: str) -> tuple[Resource, Resource]:
    """Kubernetes' own Workload and PodGroup in one version of the Workload API (gang method workload, rules
    G18, G22)."""
    return (Resource(NATIVE_GANG_GROUP, version, "workloads", "Workload"),
            Resource(NATIVE_GANG_GROUP, version, "podgroups", "PodGroup"))


#: Kubernetes 1.37's Workload and PodGroup (scheduling.k8s.io/v1beta1), and 1.36's (v1alpha2).
WORKLOADS, NATIVE_PODGROUPS = native_gang_resources(NATIVE_GANG_V1BETA1)
WORKLOADS_V1ALPHA2, NATIVE_PODGROUPS_V1ALPHA2 = native_gang_resources(NATIVE_GANG_V1ALPHA2)
#: Every version policylib writes, the newest first: the controller watches them all (a version the cluster does not
#: serve lists nothing, and its reflector looks again later), so an upgrade that changes the served one is followed.
NATIVE_GANG = tuple(r for v in NATIVE_GANG_VERSIONS for r in native_gang_resources(v))
#: Volcano's PodGroups, which policylib makes for gang.scheduler volcano (rule G21); watched only then
#: (Volcano's own controller makes one per pod of every other workload it schedules).
VOLCANO_PODGROUPS = Resource(VOLCANO_SCHEDULING_GROUP, VOLCANO_PODGROUP_VERSION, "podgroups", "PodGroup")
LEASES = Resource(COORDINATION_GROUP, "v1", "leases", "Lease")
EVENTS = Resource(EVENTS_GROUP, "v1", "events", "Event")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
MUTATING_WEBHOOKS = Resource(ADMISSIONREGISTRATION_GROUP, "v1", "mutatingwebhookconfigurations",
                             "MutatingWebhookConfiguration", namespaced=False)


def webhook_configuration(name: str) -> Resource:
    """The one MutatingWebhookConfiguration ``name``, listed and watched by name (rule W5)."""
    return Resource(MUTATING_WEBHOOKS.group, MUTATING_WEBHOOKS.version, MUTATING_WEBHOOKS.plural,
                    MUTATING_WEBHOOKS.kind, namespaced=False, field_selector=f"metadata.name={name}")


PODS = Resource("", "v1", "pods", "Pod")
#: Volcano's HyperNodes (cluster-scoped): what a partition's network topology is met by (rule V26).
HYPERNODES = Resource(HYPERNODE_GROUP, "v1alpha1", "hypernodes", "HyperNode", namespaced=False)
#: Kubeflow Trainer's runtimes, which a TrainJob's pods and gangs are computed from (rules T1, T5, T6, T7): what
#: ``plan``, ``simulate`` and ``check --cluster`` read, and what the admission server's facts and the controller
#: watch.
TRAINING_RUNTIMES = (Resource(TRAINER_GROUP, TRAINER_VERSION, "trainingruntimes", "TrainingRuntime"),
                     Resource(TRAINER_GROUP, TRAINER_VERSION, "clustertrainingruntimes", "ClusterTrainingRuntime",
                              namespaced=False))
#: Kueue's Topologies (cluster-scoped, kueue.x-k8s.io/v1beta2 in Kueue v0.19.2): the levels its podset topology
#: annotations name (rule N10).
KUEUE_TOPOLOGIES = Resource("kueue.x-k8s.io", "v1beta2", "topologies", "Topology", namespaced=False)
#: Rule S27: the pods a Deployment's ReplicaSets made (the Deployment controller labels every one), no other.
DEPLOYMENT_PODS = Resource("", "v1", "pods", "Pod", label_selector=POD_TEMPLATE_HASH)
#: The pods StatefulSets made (rule S28 of ``plan --cluster``).
STATEFULSET_PODS = Resource("", "v1", "pods", "Pod", label_selector=STATEFULSET_POD_NAME)
#: Rule P9: the kinds that run pods and that no family handles (:data:`policylib.families.UNHANDLED_WORKLOADS`),
#: each in the version its project serves now; ``check --cluster`` counts those in scope by their metadata.
UNHANDLED_WORKLOADS = tuple(Resource(group, version, plural, kind, metadata_only=True) for group, version, plural, kind in (
    (APPS_GROUP, "v1", "daemonsets", "DaemonSet"),
    (APPS_GROUP, "v1", "replicasets", "ReplicaSet"), ("batch", "v1", "jobs", "Job"), ("batch", "v1", "cronjobs", "CronJob"),
    (KUBEFLOW_GROUP, KUBEFLOW_VERSION, "paddlejobs", "PaddleJob"),
    (KUBEFLOW_GROUP, KUBEFLOW_VERSION, "xgboostjobs", "XGBoostJob"),
    (KUBEFLOW_GROUP, KUBEFLOW_VERSION, "jaxjobs", "JAXJob"), ("ray.io", "v1", "rayjobs", "RayJob"),
    ("ray.io", "v1", "rayclusters", "RayCluster"), ("ray.io", "v1", "rayservices", "RayService")))
#: Rule P10: the kinds a family handles that no webhook entry sends (:data:`policylib.families.NOT_ADMITTED`), each in
#: the version its project serves now; ``check --cluster`` counts those in scope by their metadata. None today.
NOT_ADMITTED_WORKLOADS: tuple[Resource, ...] = ()
#: What a metadata-only list asks for (kube-apiserver's ``as=PartialObjectMetadataList``).
METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
#: What ``policylib plan --cluster`` reads.
SNAPSHOT_RESOURCES = (DEPLOYMENTS, STATEFULSETS, HPAS) + GANG_JOBS + PODGROUPS + (VOLCANO_PODGROUPS,) + NATIVE_GANG

REGISTRY: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r
    for r in (DEPLOYMENTS, STATEFULSETS, HPAS, LEASES, EVENTS, NODES, PODS, NAMESPACES, CONFIGMAPS, MUTATING_WEBHOOKS)
    + GANG_JOBS + PODGROUPS + (VOLCANO_PODGROUPS,)
    + NATIVE_GANG}


def resource_for(api_version: str, kind: str) -> Resource:
    """The registered resource of ``kind`` in ``api_version``; ValueError names an unknown one."""
    try:
        return REGISTRY[(api_version, kind)]
    except KeyError:
        raise ValueError(f"no resource registered for {kind} in {api_version}") from None

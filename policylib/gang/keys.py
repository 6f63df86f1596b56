"""The metadata keys each gang scheduler reads, and which objects are Kubeflow jobs."""
from __future__ import annotations

from ..constants import (
    KUBEFLOW_API_VERSION,
    SIGS_PODGROUP_API_VERSION,
    VOLCANO_PODGROUP_API_VERSION,
    X_K8S_PODGROUP_API_VERSION,
)
from ..constants import MPI_V2_API_VERSION as MPI_V2_API_VERSION

API_VERSION = KUBEFLOW_API_VERSION
# MPI_V2_API_VERSION, the MPI Operator's current API (v0.4+): the same mpiReplicaSpecs (Launcher, Worker) and
# runPolicy.schedulingPolicy as kubeflow.org/v1, so the same gang treatment.
#: Where each kind keeps its replica specs (kubeflow/training-operator v1.9 CRDs; mpi-operator v2beta1).
REPLICA_SPECS = {"TFJob": "tfReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}
#: The kinds served in each API version.
KINDS_BY_API_VERSION = {API_VERSION: frozenset(REPLICA_SPECS), MPI_V2_API_VERSION: frozenset({"MPIJob"})}

# --- the keys each scheduler reads ------------------------------------------------
#: ACK / Koordinator lightweight coscheduling labels (rule G4; Koordinator
#: apis/extension/coscheduling.go LabelLightweightCoschedulingPodGroupName/MinAvailable).
SIGS_PREFIX = "pod-group.scheduling.sigs.k8s.io"
NAME_LABEL = f"{SIGS_PREFIX}/name"
MIN_AVAILABLE_LABEL = f"{SIGS_PREFIX}/min-available"
#: ACK's match policy (a label on pods for method labels, on the PodGroup for method podgroup).
ACK_MATCH_POLICY = f"{SIGS_PREFIX}/match-policy"
#: ACK's GangGroup key; its value is a JSON array, so it is always an annotation.
ACK_GROUPS = f"{SIGS_PREFIX}/groups"
#: The pod label of Koordinator and scheduler-plugins <= v0.24 (v1alpha1.PodGroupLabel).
LEGACY_POD_GROUP_LABEL = SIGS_PREFIX
#: The pod label of scheduler-plugins >= v0.25 (scheduling.x-k8s.io PodGroupLabel).
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: Koordinator gang annotations (apis/extension/coscheduling.go).
KOORD_PREFIX = "gang.scheduling.koordinator.sh"
KOORD_NAME = f"{KOORD_PREFIX}/name"
KOORD_MIN_AVAILABLE = f"{KOORD_PREFIX}/min-available"
KOORD_TOTAL_NUMBER = f"{KOORD_PREFIX}/total-number"
KOORD_MODE = f"{KOORD_PREFIX}/mode"
KOORD_WAITING_TIME = f"{KOORD_PREFIX}/waiting-time"
KOORD_GROUPS = f"{KOORD_PREFIX}/groups"
KOORD_MATCH_POLICY = f"{KOORD_PREFIX}/match-policy"
KOORD_STRICT = "Strict"
#: Volcano's pod group annotation (training-operator's Volcano gang mode, upstream examples).
VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"
#: Method workload (rule G16): the pod label naming the gang's scheduling.k8s.io PodGroup; the
#: webhook copies it into ``spec.schedulingGroup.podGroupName`` on Pod CREATE (rule G17). A label because
#: the Kubeflow operators' CRDs prune ``schedulingGroup`` from pod templates, and they copy template labels.
SCHEDULING_GROUP_LABEL = "policylib.io/scheduling-group"

#: The PodGroup API each scheduler watches: ACK >= 1.31 accepts only scheduling.x-k8s.io
#: (rule G5); Koordinator still vendors scheduling.sigs.k8s.io.
PODGROUP_API_VERSION = {
    "ack": X_K8S_PODGROUP_API_VERSION,
    "koordinator": SIGS_PODGROUP_API_VERSION,
    "scheduler-plugins": X_K8S_PODGROUP_API_VERSION,
    "volcano": VOLCANO_PODGROUP_API_VERSION,
}
#: Where each scheduler reads a pod's PodGroup when it is not a label: Volcano reads the annotation
#: scheduling.k8s.io/group-name (rule G21; scheduler/api/job_info.go getJobID).
PODGROUP_POD_ANNOTATION = {"volcano": VOLCANO_GROUP_NAME}
#: The pod label that points a pod at its PodGroup, per scheduler (rule G5;
#: Koordinator coscheduling/util GetGangNameByPod; scheduler-plugins PodGroupLabel).
PODGROUP_POD_LABEL = {
    "ack": NAME_LABEL,
    "koordinator": LEGACY_POD_GROUP_LABEL,
    "scheduler-plugins": POD_GROUP_LABEL,
}
#: Keys whose value names a gang, in the order Koordinator's GetGangNameByPod reads them,
#: then scheduler-plugins' and Volcano's.
NAME_KEYS = (("labels", LEGACY_POD_GROUP_LABEL), ("labels", NAME_LABEL), ("annotations", KOORD_NAME),
             ("labels", POD_GROUP_LABEL), ("annotations", VOLCANO_GROUP_NAME), ("labels", SCHEDULING_GROUP_LABEL))
#: Which of the name keys each scheduler reads on a pod.
NAME_KEYS_READ = {
    "ack": {NAME_LABEL, KOORD_NAME},
    "koordinator": {LEGACY_POD_GROUP_LABEL, NAME_LABEL, KOORD_NAME},
    "scheduler-plugins": {POD_GROUP_LABEL},
    "kube-scheduler": {SCHEDULING_GROUP_LABEL},
    "volcano": {VOLCANO_GROUP_NAME},
}
MIN_KEYS = (("labels", MIN_AVAILABLE_LABEL), ("annotations", KOORD_MIN_AVAILABLE))
GROUPS_KEYS = (("annotations", ACK_GROUPS), ("annotations", KOORD_GROUPS))
_GANG_EXACT_KEYS = {LEGACY_POD_GROUP_LABEL, POD_GROUP_LABEL, VOLCANO_GROUP_NAME, SCHEDULING_GROUP_LABEL}
_GANG_PREFIXES = (f"{SIGS_PREFIX}/", f"{KOORD_PREFIX}/")


def is_kubeflow_job(obj: object) -> bool:
    """A ``kubeflow.org/v1`` TFJob, PyTorchJob or MPIJob, or a ``kubeflow.org/v2beta1`` MPIJob."""
    if not isinstance(obj, dict) or not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        return False
    return obj["kind"] in KINDS_BY_API_VERSION.get(obj["apiVersion"], ())


def is_gang_key(key: str) -> bool:
    """Gang metadata of any scheduler: the sigs.k8s.io and Koordinator families,
    the scheduler-plugins pod label, and Volcano's group-name annotation."""
    return key in _GANG_EXACT_KEYS or key.startswith(_GANG_PREFIXES)

"""The names policylib shares with the API server and the install, defined once.

The API groups, versions and kinds policylib reads and writes, the well-known label keys it reads on
Nodes and pods, the namespace it is installed in and the server's listening defaults. Every other
module imports them from here; ``tests/test_layers.py`` fails on one of these values written as a
literal anywhere else in ``policylib`` or ``webhook`` (docstrings excepted: they explain, they do
not decide). The metadata keys each gang scheduler reads are :mod:`policylib.gang.keys`'s.
"""
from __future__ import annotations

# --- built-in APIs -----------------------------------------------------------------------------------------

APPS_GROUP = "apps"
APPS_API_VERSION = f"{APPS_GROUP}/v1"
AUTOSCALING_GROUP = "autoscaling"
AUTOSCALING_API_VERSION = f"{AUTOSCALING_GROUP}/v2"
COORDINATION_GROUP = "coordination.k8s.io"
COORDINATION_API_VERSION = f"{COORDINATION_GROUP}/v1"
EVENTS_GROUP = "events.k8s.io"
EVENTS_API_VERSION = f"{EVENTS_GROUP}/v1"
#: The AdmissionReview the API server sends and the webhook answers.
ADMISSION_GROUP = "admission.k8s.io"
ADMISSION_API_VERSION = f"{ADMISSION_GROUP}/v1"
#: The MutatingWebhookConfiguration (its selectors are the controller's and the CLI's scope, rules W5, W6).
ADMISSIONREGISTRATION_GROUP = "admissionregistration.k8s.io"
ADMISSIONREGISTRATION_API_VERSION = f"{ADMISSIONREGISTRATION_GROUP}/v1"

# --- Kubeflow --------------------------------------------------------------------------------------------

KUBEFLOW_GROUP = "kubeflow.org"
#: training-operator's TFJob, PyTorchJob and MPIJob.
KUBEFLOW_VERSION = "v1"
KUBEFLOW_API_VERSION = f"{KUBEFLOW_GROUP}/{KUBEFLOW_VERSION}"
#: The MPI Operator's current API (v0.4+).
MPI_V2_VERSION = "v2beta1"
MPI_V2_API_VERSION = f"{KUBEFLOW_GROUP}/{MPI_V2_VERSION}"

# --- JobSet and Kubeflow Trainer v2 ---------------------------------------------------------------------------

#: JobSet (sigs.k8s.io/jobset v0.12.0): a group of batch Jobs, each ReplicatedJob a template of Jobs.
JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_API_VERSION = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
#: Kubeflow Trainer v2 (v2.3.0): TrainJob, TrainingRuntime, ClusterTrainingRuntime; a TrainJob becomes one JobSet.
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_VERSION = "v1alpha1"
TRAINER_API_VERSION = f"{TRAINER_GROUP}/{TRAINER_VERSION}"

# --- LeaderWorkerSet ---------------------------------------------------------------------------------------

#: LeaderWorkerSet (sigs.k8s.io/lws v0.10.0): ``replicas`` groups of ``size`` pods, a leader and its workers.
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_VERSION = "v1"
LWS_API_VERSION = f"{LWS_GROUP}/{LWS_VERSION}"
#: The labels LWS puts on every pod of a LeaderWorkerSet (``api/leaderworkerset/v1`` constants): its name, the
#: pod's index in its group (``"0"`` on the leader) and the group's key (the same on each pod of one group).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
#: LWS's annotations on the LeaderWorkerSet that place one group (or subgroup) per topology domain.
LWS_EXCLUSIVE_TOPOLOGY_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_SUBGROUP_EXCLUSIVE_TOPOLOGY_ANNOTATION = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"

# --- Volcano -----------------------------------------------------------------------------------------------

#: Every Volcano API group ends with this (batch.volcano.sh, scheduling.volcano.sh, topology.volcano.sh, ...).
VOLCANO_DOMAIN = "volcano.sh"
VOLCANO_BATCH_GROUP = f"batch.{VOLCANO_DOMAIN}"
VOLCANO_JOB_VERSION = "v1alpha1"
VOLCANO_JOB_API_VERSION = f"{VOLCANO_BATCH_GROUP}/{VOLCANO_JOB_VERSION}"
VOLCANO_SCHEDULING_GROUP = f"scheduling.{VOLCANO_DOMAIN}"
VOLCANO_PODGROUP_VERSION = "v1beta1"
VOLCANO_PODGROUP_API_VERSION = f"{VOLCANO_SCHEDULING_GROUP}/{VOLCANO_PODGROUP_VERSION}"
HYPERNODE_GROUP = f"topology.{VOLCANO_DOMAIN}"
HYPERNODE_API_VERSION = f"{HYPERNODE_GROUP}/v1alpha1"

# --- PodGroups of the coscheduling schedulers ----------------------------------------------------------

#: scheduler-plugins' (and ACK >= 1.31's) PodGroup API.
X_K8S_GROUP = "scheduling.x-k8s.io"
X_K8S_PODGROUP_API_VERSION = f"{X_K8S_GROUP}/v1alpha1"
#: Koordinator's (and scheduler-plugins <= v0.24's) PodGroup API.
SIGS_GROUP = "scheduling.sigs.k8s.io"
SIGS_PODGROUP_API_VERSION = f"{SIGS_GROUP}/v1alpha1"
KOORDINATOR_GROUP = "scheduling.koordinator.sh"
PODGROUP_KIND = "PodGroup"

# --- Kubernetes' own gang scheduling: the Workload API (rules G16-G20, G22-G25) --------------------------

NATIVE_GANG_GROUP = "scheduling.k8s.io"
#: Kubernetes 1.37's Workload API (beta, served once enabled: --runtime-config and the GenericWorkload gate).
NATIVE_GANG_V1BETA1 = "v1beta1"
NATIVE_GANG_V1BETA1_API_VERSION = f"{NATIVE_GANG_GROUP}/{NATIVE_GANG_V1BETA1}"
#: Kubernetes 1.36's Workload API (alpha; removed in 1.37).
NATIVE_GANG_V1ALPHA2 = "v1alpha2"
NATIVE_GANG_V1ALPHA2_API_VERSION = f"{NATIVE_GANG_GROUP}/{NATIVE_GANG_V1ALPHA2}"
#: The Workload API versions policylib writes, newest first (``gang.workloadAPIVersion: auto`` takes the first
#: the cluster serves).
NATIVE_GANG_VERSIONS = (NATIVE_GANG_V1BETA1, NATIVE_GANG_V1ALPHA2)
NATIVE_GANG_API_VERSIONS = (NATIVE_GANG_V1BETA1_API_VERSION, NATIVE_GANG_V1ALPHA2_API_VERSION)
WORKLOAD_KIND = "Workload"

# --- the API's enumerations -----------------------------------------------------------------------------------

#: whenUnsatisfiable's two values (k8s.io/api core/v1 ``UnsatisfiableConstraintAction``).
DO_NOT_SCHEDULE, SCHEDULE_ANYWAY = "DoNotSchedule", "ScheduleAnyway"
WHEN_UNSATISFIABLE = (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY)

# --- well-known label keys and taints ------------------------------------------------------------------

ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The label a Deployment's controller puts on each ReplicaSet's pods.
POD_TEMPLATE_HASH = "pod-template-hash"
#: The label the StatefulSet controller puts on each of its pods: the pod's name (``<set>-<ordinal>``).
STATEFULSET_POD_NAME = "statefulset.kubernetes.io/pod-name"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

# --- the install -------------------------------------------------------------------------------------------

#: The namespace the manifests and the chart install into by default.
INSTALL_NAMESPACE = "policylib-system"
#: The webhook's name: its image, its pods' ``app.kubernetes.io/name`` label, its server's process name, and the
#: name of its objects below.
WEBHOOK_NAME = "policylib-webhook"
#: The names the manifests and the chart give the webhook's objects: its MutatingWebhookConfiguration (whose
#: selectors are the controller's and the CLI's scope), its Service, and the Secrets of its CA and serving certificate.
WEBHOOK_CONFIGURATION = WEBHOOK_NAME
WEBHOOK_SERVICE = WEBHOOK_NAME
WEBHOOK_CA_SECRET = f"{WEBHOOK_NAME}-ca"
WEBHOOK_TLS_SECRET = f"{WEBHOOK_NAME}-tls"
#: The controller's name: its pods' ``app.kubernetes.io/name`` label, the ``app.kubernetes.io/managed-by`` of the
#: objects it makes, and its Lease's default name (``controller.leaseName``).
CONTROLLER_NAME = "policylib-controller"
#: How long a leader's Lease lasts without renewal, by default (``controller.leaseDurationSeconds``; client-go's
#: LeaseDuration default): also the duration a Lease that states none is read with.
LEASE_DURATION_SECONDS = 15
#: The ConfigMap the manifests and the chart install the config in, and its key (the file the processes read).
CONFIG_MAP = "policylib-config"
CONFIG_KEY = "config.yaml"
#: Every address of the host (a server's default listening address; a hostPort's default hostIP).
ANY_ADDRESS = "0.0.0.0"
#: This machine only (``run-local``'s listening address).
LOOPBACK_ADDRESS = "127.0.0.1"
#: The webhook server's default port.
WEBHOOK_PORT = 8443
#: The controller's default port (/healthz, /readyz, /metrics).
CONTROLLER_PORT = 8081

# --- the Volcano release whose rules policylib follows ---------------------------------------------------

#: The newest Volcano release whose admission rules are ported (``volcano.version``'s default).
VOLCANO_VERSION = "v1.15.1"

# --- the API server's limits ----------------------------------------------------------------------------------

#: The largest request body the API server reads (k8s.io/apiserver pkg/server/config.go ``MaxRequestBodyBytes``):
#: the largest object a client can create or update.
API_REQUEST_BYTES = 3 * 1024 * 1024
#: Room in an AdmissionReview for what surrounds its objects (uid, kind, resource, userInfo with its groups and
#: extra claims, options).
REVIEW_ENVELOPE_BYTES = 64 * 1024
#: The largest AdmissionReview the API server sends for such objects: an UPDATE carries the object and the old one.
MAX_REVIEW_BYTES = 2 * API_REQUEST_BYTES + REVIEW_ENVELOPE_BYTES

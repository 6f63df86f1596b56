"""Shared pieces of the end-to-end gang tests with the real job operators: the clusters
(``testcluster --training-operator``, ``--mpi-operator``, ``--koordinator``), the jobs, and what to read
back. Each test creates only the job; the operator creates its pods, the webhook mutated the job."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from policylib.check import check

from .harness import (
    DEFAULT_MINOR,
    NODE_GROUP_LABEL,
    ROOT,
    Cluster,
    bound,
    node_list,
    require_built,
    scheduling_failures,
    wait_for,
)

GROUP = NODE_GROUP_LABEL
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
COSCHEDULING = "scheduler-plugins-scheduler"
KOORD = "koord-scheduler"
LEASE_NS = "policylib-system"
#: Node groups, in CPUs per node; every pod below asks for 1 CPU.
NODE_GROUPS = {
    "fits3": [2, 1],          # exactly a 3-pod gang
    "fits3b": [2, 1],
    "fits3c": [2, 1],
    "fits3d": [2, 1],
    "fits3e": [2, 1],
    "short": [2, 1],          # 3 CPUs for a 4-pod gang
    "role": [2],              # a GangGroup whose second role does not fit, until room is added
    "once": [1, 1, 1],        # match policies: a 3-pod gang, then two replacement pods with room for one
    "war": [1, 1, 1],
}


def write_nodes(tmp: Path) -> Path:
    path = tmp / "nodes.yaml"
    path.write_text(yaml.safe_dump(node_list(NODE_GROUPS)))
    return path


def module_file(module: str, go_module: str, path: str) -> Path:
    """A file of a Go module's own source, as the e2e module at ``module`` resolves it (the module cache)."""
    run = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", go_module], cwd=ROOT / "e2e" / module,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    found = Path(run.stdout.strip()) / path
    assert found.is_file(), found
    return found


def podgroup_crd() -> Path:
    """scheduler-plugins' PodGroup CRD from the module e2e/coscheduling builds (no ../shared needed)."""
    return module_file("coscheduling", "sigs.k8s.io/scheduler-plugins",
                       "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml")


def start_cluster(tmp: Path, *flags: str, targets: tuple[str, ...], minor: str = DEFAULT_MINOR) -> Cluster:
    """Check what each make target builds is there (a missing one fails the tests) and start a cluster of the
    Kubernetes ``minor`` with ``flags``."""
    for target in targets:
        require_built(target)
    return Cluster(tmp / "c", nodes=write_nodes(tmp), extra_args=flags, minor=minor)


def container(kind: str) -> dict:
    name = {"TFJob": "tensorflow", "PyTorchJob": "pytorch", "MPIJob": "mpi"}[kind]
    return {"name": name, "image": "registry.example/train:1",
            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}


def replica(kind: str, replicas: int, group: str, scheduler: str | None, **template_meta: dict) -> dict:
    spec: dict = {"nodeSelector": {GROUP: group}, "containers": [container(kind)]}
    if scheduler:
        spec["schedulerName"] = scheduler
    template: dict = {"spec": spec}
    if template_meta:
        template["metadata"] = template_meta
    return {"replicas": replicas, "restartPolicy": "Never", "template": template}


def tfjob(name: str, ns: str, group: str, scheduler: str | None, ps: int = 1, workers: int = 2) -> dict:
    specs = {"PS": replica("TFJob", ps, group, scheduler)} if ps else {}
    specs["Worker"] = replica("TFJob", workers, group, scheduler)
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": ns},
            "spec": {"tfReplicaSpecs": specs}}


def pytorchjob(name: str, ns: str, group: str, scheduler: str | None, workers: int = 2) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": ns},
            "spec": {"pytorchReplicaSpecs": {"Master": replica("PyTorchJob", 1, group, scheduler),
                                             "Worker": replica("PyTorchJob", workers, group, scheduler)}}}


def mpijob(name: str, ns: str, group: str, scheduler: str | None, workers: int = 2) -> dict:
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name, "namespace": ns},
            "spec": {"slotsPerWorker": 1, "launcherCreationPolicy": "AtStartup",
                     "mpiReplicaSpecs": {"Launcher": replica("MPIJob", 1, group, scheduler),
                                         "Worker": replica("MPIJob", workers, group, scheduler)}}}


RESOURCE = {"TFJob": "tfjobs.kubeflow.org", "PyTorchJob": "pytorchjobs.kubeflow.org", "MPIJob": "mpijobs.kubeflow.org"}


def create(c: Cluster, job: dict) -> dict:
    """Create the job through the API server (and so through the webhook); returns it as stored."""
    c.kubectl("create", "-f", "-", input=json.dumps(job))
    return c.get(RESOURCE[job["kind"]], job["metadata"]["name"], job["metadata"]["namespace"])


def job_pods(c: Cluster, ns: str, job: dict) -> list[dict]:
    """The pods the operator created for the job (training-operator's and the MPI Operator's job-name
    labels; the MPI launcher's pod is made by the Job controller from the launcher Job)."""
    name = job["metadata"]["name"]
    key = "training.kubeflow.org/job-name"
    return [p for p in c.list("pods", ns) if p["metadata"].get("labels", {}).get(key) == name]


def wait_pods(c: Cluster, ns: str, job: dict, n: int, timeout: float = 120) -> list[dict]:
    return wait_for(f"the operator creates {n} pods of {ns}/{job['metadata']['name']}",
                    lambda: (lambda ps: ps if len(ps) == n else None)(job_pods(c, ns, job)), timeout=timeout)


def rejected_everyone(c: Cluster, ns: str, names: list[str], ever_bound: set[str], job: dict) -> bool:
    """Every pod has a FailedScheduling event and none was ever bound (``ever_bound`` collects)."""
    ever_bound.update(bound(job_pods(c, ns, job)))
    failures = scheduling_failures(c, ns)
    return bool(ever_bound) or set(names) <= set(failures)


def check_gang(config: dict, c: Cluster, job: dict, group: str) -> list[str]:
    """``policylib check``'s gang findings for the stored job on the group's real Nodes."""
    nodes = [n for n in c.list("nodes") if n["metadata"]["labels"].get(GROUP) == group]
    return [f.message for f in check(config, nodes, [job]) if f.key == "gang.method"]

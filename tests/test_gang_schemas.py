"""Every upstream Kubeflow example under every method and scheduler,
validated against the upstream CRDs in ../shared/schemas, through ``policylib preview`` too."""
import copy
import glob
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from policylib import load_config, mutate, validate_gang_labels
from policylib.cli import EXIT_DENIED, main
from policylib.gang import PODGROUP_API_VERSION, REPLICA_SPECS, is_gang_key
from tests.crd import crd_validator
from tests.helpers import shared_path
from tests.test_gang import COMBINATIONS, SEED_TFJOB, bare_seed_job, templates

POLICYLIB = str(Path(sys.executable).parent / "policylib")
JOB_CRDS = {"TFJob": "kubeflow.org_tfjobs.yaml", "PyTorchJob": "kubeflow.org_pytorchjobs.yaml",
            "MPIJob": "kubeflow.org_mpijobs.yaml"}
#: The PodGroup CRD each scheduler installs (SOURCE.md of each folder).
PODGROUP_CRDS = {"ack": ("scheduler-plugins", "scheduling.x-k8s.io_podgroups.yaml"),
                 "scheduler-plugins": ("scheduler-plugins", "scheduling.x-k8s.io_podgroups.yaml"),
                 "koordinator": ("koordinator", "scheduling.sigs.k8s.io_podgroups.yaml")}
EXAMPLES = sorted(glob.glob(str(shared_path("examples", "kubeflow", "*.yaml"))))
CONFIGS = [dict(method=m, scheduler=s, groupByRole=g, **({"matchPolicy": "once-satisfied"} if s != "scheduler-plugins"
                                                        else {}))
           for m, s in COMBINATIONS for g in ((False, True) if s != "scheduler-plugins" else (False,))]


def config_id(c):
    return f"{c['method']}-{c['scheduler']}" + ("-groupByRole" if c["groupByRole"] else "")


def job_errors(obj: dict) -> list[str]:
    validator = crd_validator("schemas", "kubeflow", JOB_CRDS[obj["kind"]], version="v1")
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj))


def podgroup_errors(pg: dict, scheduler: str) -> list[str]:
    folder, name = PODGROUP_CRDS[scheduler]
    path = shared_path("schemas", folder, name)
    if not path.exists():
        pytest.skip(f"{path} not found: the upstream CRD schemas live in ../shared beside the project")
    crd = next(d for d in yaml.safe_load_all(path.read_text()) if d)
    assert pg["apiVersion"] == f"{crd['spec']['group']}/v1alpha1" == PODGROUP_API_VERSION[scheduler]
    assert pg["kind"] == crd["spec"]["names"]["kind"]
    validator = crd_validator("schemas", folder, name)
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(pg))


def preview(tmp_path, config: dict, *objs, old=None) -> tuple[int, list[dict], str]:
    cfg_file = tmp_path / "gang.yaml"
    cfg_file.write_text(yaml.safe_dump({"gang": config}))
    job_file = tmp_path / "job.yaml"
    job_file.write_text("---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objs))
    args = ["preview", "--config", str(cfg_file), "-f", str(job_file)]
    if old is not None:
        (tmp_path / "old.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
        args += ["--old", str(tmp_path / "old.yaml")]
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main(args, stdout=stdout, stderr=stderr)
    return code, [d for d in yaml.safe_load_all(stdout.getvalue()) if d], stderr.getvalue()


# --- every upstream example, every method and scheduler -------------------------------------

@pytest.mark.skipif(not EXAMPLES, reason="upstream Kubeflow examples live in ../shared/examples/kubeflow")
@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_upstream_example_previews_and_validates(path, config, tmp_path):
    job = yaml.safe_load(Path(path).read_text())
    assert job_errors(job) == []
    code, docs, stderr = preview(tmp_path, config, job)
    assert code == 0, stderr
    out, podgroups = docs[0], docs[1:]
    assert out == mutate(job, load_config({"gang": config})).object
    assert job_errors(out) == []
    assert validate_gang_labels(out) == []
    for pg in podgroups:
        assert podgroup_errors(pg, config["scheduler"]) == []
        assert validate_gang_labels(pg) == []
    carried = any(is_gang_key(k) for t in templates(job).values() for part in ("labels", "annotations")
                  for k in ((t.get("metadata") or {}).get(part) or {}))
    if carried:   # the v1.7 Volcano example: scheduling.k8s.io/group-name is kept as the user wrote it
        assert out == job and podgroups == []
        return
    pods = sum(s.get("replicas", 1) for s in job["spec"][REPLICA_SPECS[job["kind"]]].values())
    gangs = {str(v) for t in templates(out).values() for part in ("labels", "annotations")
             for k, v in (t["metadata"].get(part) or {}).items() if k.endswith(("/name", "/pod-group"))
             or k == "pod-group.scheduling.sigs.k8s.io"}
    assert len(gangs) == (len(templates(job)) if config["groupByRole"] else 1)
    if config["method"] == "podgroup":
        assert sorted(pg["metadata"]["name"] for pg in podgroups) == sorted(gangs)
        assert sum(pg["spec"]["minMember"] for pg in podgroups) == pods  # one gang, or one per role
    else:
        assert podgroups == []
    again = mutate(out, load_config({"gang": config}))
    assert again.patch == []


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_seed_job_output_adds_no_schema_error(config):
    """The seed's templates carry ``creationTimestamp: null``, which the CRD's template metadata does
    not list (the API server prunes it); the output has exactly the input's findings, no new ones."""
    out = mutate(bare_seed_job(), load_config({"gang": config}))
    assert job_errors(out.object) == job_errors(bare_seed_job()) == job_errors(SEED_TFJOB)
    for pg in out.extra_objects:
        assert podgroup_errors(pg, config["scheduler"]) == []


# --- the console script -------------------------------------------------------------------------

def run(*args):
    return subprocess.run([POLICYLIB, *args], capture_output=True, text=True, timeout=60)


def test_console_script_previews_the_job_and_its_podgroup(tmp_path):
    (tmp_path / "gang.yaml").write_text("gang:\n  method: podgroup\n  scheduler: ack\n  scheduleTimeoutSeconds: 30\n")
    (tmp_path / "tfjob.yaml").write_text(yaml.safe_dump(bare_seed_job(), sort_keys=False))
    out = run("preview", "--config", str(tmp_path / "gang.yaml"), "-f", str(tmp_path / "tfjob.yaml"))
    assert out.returncode == 0, out.stderr
    job, pg = yaml.safe_load_all(out.stdout)
    assert {t["metadata"]["labels"]["pod-group.scheduling.sigs.k8s.io/name"] for t in templates(job).values()} == \
        {"tf-smoke-gpu"}
    assert pg == {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                  "metadata": {"name": "tf-smoke-gpu", "namespace": "default"},
                  "spec": {"scheduleTimeoutSeconds": 30, "minMember": 5}}


def test_console_script_exits_3_on_a_denied_job(tmp_path):
    job = bare_seed_job()
    templates(job)["PS"]["spec"]["priorityClassName"] = "high-priority"
    (tmp_path / "gang.yaml").write_text("gang:\n  onViolation: deny\n")
    (tmp_path / "tfjob.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    out = run("preview", "--config", str(tmp_path / "gang.yaml"), "-f", str(tmp_path / "tfjob.yaml"))
    assert out.returncode == EXIT_DENIED == 3
    assert out.stderr == (
        f"policylib: denied: {tmp_path / 'tfjob.yaml'}: TFJob tf-smoke-gpu: replica types PS and Worker have "
        "different priorityClassName (PS: high-priority, Worker: <none: cluster default>); all pods of gang "
        "tf-smoke-gpu must share one priority (rule G9), so no gang metadata was written\n")
    assert yaml.safe_load(out.stdout) == job


def test_preview_of_an_update_shows_the_recomputed_podgroup(tmp_path):
    config = {"method": "podgroup", "scheduler": "koordinator"}
    old = mutate(bare_seed_job(), load_config({"gang": config})).object
    new = copy.deepcopy(old)
    new["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 8
    code, docs, _ = preview(tmp_path, config, new, old=old)
    assert code == 0 and docs[0] == new
    assert docs[1]["spec"] == {"scheduleTimeoutSeconds": 10, "minMember": 9}


# --- MPIJob kubeflow.org/v2beta1 (the MPI Operator's API) ------------------------------------------

MPI_V2_EXAMPLES = sorted(glob.glob(str(shared_path("examples", "mpi-operator", "*.yaml"))))


def mpi_v2_errors(obj: dict) -> list[str]:
    validator = crd_validator("schemas", "mpi-operator", "kubeflow.org_mpijobs.v2beta1.yaml", version="v2beta1")
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj))


@pytest.mark.skipif(not MPI_V2_EXAMPLES, reason="upstream MPI Operator examples live in ../shared/examples/mpi-operator")
@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@pytest.mark.parametrize("path", MPI_V2_EXAMPLES, ids=os.path.basename)
def test_mpi_operator_v2beta1_examples_get_the_same_gang_treatment(path, config):
    job = yaml.safe_load(Path(path).read_text())
    assert job["apiVersion"] == "kubeflow.org/v2beta1"
    before = mpi_v2_errors(job)   # pi-intel.yaml has a `command:` with no value; nothing else may appear
    result = mutate(job, load_config({"gang": config}))
    assert mpi_v2_errors(result.object) == before
    assert validate_gang_labels(result.object) == []
    as_v1 = mutate(dict(job, apiVersion="kubeflow.org/v1"), load_config({"gang": config}))
    assert result.patch == as_v1.patch        # the same treatment as the training-operator's MPIJob
    assert result.patch, "every example gets gang metadata"
    for pg in result.extra_objects:
        assert podgroup_errors(pg, config["scheduler"]) == []

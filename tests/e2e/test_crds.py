"""Volcano Jobs and Kubeflow jobs admitted through the webhook are stored with every field policylib
wrote: the upstream CRDs' structural schemas prune unknown fields, so a field of ours that the schema
does not know would vanish here."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from .conftest import CONFIGS
from .harness import ROOT, SHARED
from .util import POLICYLIB

#: The upstream CRDs' schemas prune what the API server of each minor does not accept.
pytestmark = pytest.mark.minors()

CRDS = ["schemas/volcano/batch.volcano.sh_jobs.yaml", "schemas/volcano/scheduling.volcano.sh_podgroups.yaml",
        "schemas/kubeflow/kubeflow.org_tfjobs.yaml", "schemas/kubeflow/kubeflow.org_pytorchjobs.yaml",
        "schemas/kubeflow/kubeflow.org_mpijobs.yaml", "schemas/scheduler-plugins/scheduling.x-k8s.io_podgroups.yaml"]
#: Upstream examples that are not valid jobs on purpose, or not jobs.
NOT_JOBS = {"invalid-duplicated-policy-event.yaml", "hypernode-discovery-configmap.from-docs.yaml"}
#: Examples policylib leaves alone by design.
LEFT_ALONE = {"tfjob-estimator-volcano-annotation.yaml"}  # already ganged: scheduling.k8s.io/group-name


def examples() -> list:
    if not SHARED.is_dir():
        return [pytest.param(None, id="no-shared", marks=pytest.mark.skip(
            reason="../shared/ (upstream CRDs and examples) is not beside the project"))]
    out = []
    for folder in ("volcano", "kubeflow"):
        for path in sorted((SHARED / "examples" / folder).glob("*.yaml")):
            if path.name not in NOT_JOBS:
                out.append(pytest.param(path, id=f"{folder}/{path.stem}"))
    return out


@pytest.fixture(scope="session")
def crds(cluster):
    if not SHARED.is_dir():
        pytest.skip("../shared/ (upstream CRDs) is not beside the project")
    return cluster.install_crds(*CRDS)


def resolve(obj, pointer: str):
    node = obj
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def contains(stored, value) -> bool:
    """``value`` is in ``stored``: maps may hold more keys (the API server's defaults), all else is equal."""
    if isinstance(value, dict):
        return isinstance(stored, dict) and all(k in stored and contains(stored[k], v) for k, v in value.items())
    return stored == value


def policylib_patches(docs: list[dict], tmp: Path) -> list[list[dict]]:
    src, cfg = tmp / "in.yaml", tmp / "config.yaml"
    src.write_text(yaml.safe_dump_all(docs))
    cfg.write_text(yaml.safe_dump(CONFIGS["gang"]))
    run = subprocess.run([*POLICYLIB, "preview", "--config", str(cfg), "-f", str(src), "-o", "patch"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    return [json.loads(line) for line in run.stdout.splitlines()]


@pytest.mark.parametrize("path", examples())
def test_stored_with_every_field_written(cluster, webhooks, crds, ns, tmp_path, path):
    webhooks("gang")
    cluster.namespace(ns, config="gang")
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    jobs = [d for d in docs if d.get("kind") in ("Job", "TFJob", "PyTorchJob", "MPIJob")]
    assert jobs, f"{path.name}: no job"
    for job in jobs:
        job["metadata"]["namespace"] = ns
        job["metadata"].pop("generateName", None)
        job["metadata"].setdefault("name", path.stem.lower().replace(".", "-").replace("_", "-")[:50])
    patches = policylib_patches(jobs, tmp_path)
    written = sum(len(p) for p in patches)
    cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(jobs))
    for job, patch in zip(jobs, patches, strict=True):
        resource = {"Job": "jobs.batch.volcano.sh"}.get(job["kind"], f"{job['kind'].lower()}s.kubeflow.org")
        stored = cluster.get(resource, job["metadata"]["name"], ns)
        lost = [op for op in patch if op["op"] in ("add", "replace")
                and not _has(stored, op["path"], op["value"])]
        assert lost == [], f"{path.name}: fields policylib wrote are not stored: {lost}"
        removed = [op for op in patch if op["op"] == "remove" and _present(stored, op["path"])]
        assert removed == []
    if path.parent.name == "kubeflow" and path.name not in LEFT_ALONE:
        assert written > 0, f"{path.name}: policylib wrote nothing (config {CONFIGS['gang']})"


def _has(stored, pointer, value) -> bool:
    try:
        return contains(resolve(stored, pointer), value)
    except (KeyError, IndexError, TypeError, ValueError):
        return False


def _present(stored, pointer) -> bool:
    try:
        resolve(stored, pointer)
        return True
    except (KeyError, IndexError, TypeError, ValueError):
        return False

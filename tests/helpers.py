"""Shared test builders and locations."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


#: A launcher that runs a module as ``python -m`` does with deprecations as errors (``-c LAUNCH MODULE ARGS``): the
#: interpreter's ``-W`` cannot name cryptography's warning class (read before site-packages is on the path).
LAUNCH = """\
import runpy, sys, warnings
from cryptography.utils import CryptographyDeprecationWarning
for category in (DeprecationWarning, PendingDeprecationWarning, CryptographyDeprecationWarning):
    warnings.simplefilter("error", category)
module = sys.argv.pop(1)
sys.argv[0] = module
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""

def shared_path(*parts: str) -> Path:
    """A path under ../shared/ (beside the project); tests skip when it is absent."""
    return SHARED.joinpath(*parts)


def deployment(name: str = "web", namespace: str = "ml", replicas: int | None = 3,
               labels: dict | None = None, pod_spec: dict | None = None, annotations: dict | None = None,
               selector: dict | None = None) -> dict:
    """A valid apps/v1 Deployment whose selector matches its template labels."""
    labels = labels or {"app": name}
    meta = {"name": name, "namespace": namespace}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    spec: dict = {
        "selector": selector or {"matchLabels": dict(labels)},
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": pod_spec or {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
        },
    }
    if replicas is not None:
        spec = {"replicas": replicas, **spec}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}


def hpa(target: str, min_replicas: int | None, namespace: str = "ml", name: str | None = None,
        version: str = "v2") -> dict:
    spec: dict = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                  "maxReplicas": 50}
    if min_replicas is not None:
        spec["minReplicas"] = min_replicas
    return {"apiVersion": f"autoscaling/{version}", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name or target, "namespace": namespace}, "spec": spec}


def legacy_anti_affinity(labels: dict, topology_key: str = "kubernetes.io/hostname", preferred: bool = False) -> dict:
    """The pre-11.14 ``ha_topology_key`` rule: keep replicas of one workload apart."""
    term = {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": topology_key}
    if preferred:
        return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]}}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def constraints(obj: dict) -> list:
    return pod_spec(obj).get("topologySpreadConstraints", [])


def by_key(obj: dict) -> dict:
    return {c["topologyKey"]: c for c in constraints(obj)}


def frozen(obj: dict) -> dict:
    return copy.deepcopy(obj)


def documented_install_steps(page: str = "docs/webhook.md",
                             after: str = "**Self-managed certificate** (no extra software):") -> str:
    """The shell block the docs give for the kustomize install with self-managed certificates, as written: the
    first ``sh`` code block after ``after`` on ``page`` (tests run it, so a change to the docs is what they test)."""
    text = (REPO / page).read_text()
    start = text.index(after) + len(after)
    block = text.index("```sh\n", start) + len("```sh\n")
    return text[block:text.index("```", block)]


def answer_a_review(argv: list[str], ca: Path, port: int, sample: str = "deployment-create.json", deadline: float = 90,
                    **popen: Any) -> tuple[dict | None, int, str]:
    """Starts the server ``argv`` (``python -m webhook run-local`` in some install), posts the sample review over TLS
    to ``127.0.0.1:port`` once ``ca`` (the CA run-local writes) exists, until answered or ``deadline`` seconds pass,
    then stops it with SIGTERM: (the AdmissionReview answered or None, its exit status, its stderr)."""
    import json
    import signal
    import ssl
    import subprocess
    import time
    import urllib.request
    review = json.loads((REPO / "webhook" / "samples" / sample).read_text())
    proc = subprocess.Popen(argv, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)
    answer = None
    try:
        until = time.monotonic() + deadline
        while answer is None and time.monotonic() < until and proc.poll() is None:
            if not ca.exists():
                time.sleep(0.1)
                continue
            request = urllib.request.Request(f"https://127.0.0.1:{port}/mutate", data=json.dumps(review).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=str(ca)),
                                            timeout=10) as response:
                    answer = json.loads(response.read())
            except (OSError, ssl.SSLError):
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    return answer, proc.returncode, stderr

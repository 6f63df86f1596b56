"""Shared test builders and locations."""
from __future__ import annotations

import copy
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


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

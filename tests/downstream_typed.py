"""A downstream tool's use of policylib's public API, as another project writes it.

tests/test_distribution.py type-checks this file with ``mypy --strict`` against the wheel installed in a
fresh virtualenv (``py.typed``): a public name that loses its annotations fails ``assert_type`` or
``--strict``'s untyped-call check. It also runs it there.
"""
from __future__ import annotations

import sys
from typing import Any, assert_type

import policylib
from policylib import (
    ClusterFacts,
    Config,
    ConfigError,
    Drift,
    FieldError,
    Finding,
    Placement,
    PolicyError,
    Result,
    check,
    load_config,
    mutate,
    simulate,
    spread_drift,
    validate_topology_spread_constraints,
)
from policylib.plan import Write, plan
from policylib.validation import validate_volcano_job


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "ci"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": name, "image": "nginx",
                                                           "resources": {"requests": {"cpu": "100m"}}}]}}}}


def node(name: str, zone: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def lint(objects: list[dict[str, Any]], config: Config) -> list[str]:
    """What a CI linter reports: each object the webhook would change, with its first reason."""
    out: list[str] = []
    facts = assert_type(ClusterFacts.from_objects(objects), ClusterFacts)
    for obj in objects:
        try:
            result = assert_type(mutate(obj, config, facts=facts), Result)
        except PolicyError as e:
            out.append(f"{e.obj_ref}: {e.field}: {e.message}")
            continue
        patch: list[dict[str, Any]] = result.patch
        if patch:
            out.append(f"{obj['metadata']['name']}: {len(patch)} change(s): {result.reasons[0]}")
    return out


def main() -> int:
    config = assert_type(load_config({"hostTopologySpread": {"hardMinReplicas": 2}}), Config)
    objects = [deployment("web", 4), deployment("api", 1)]
    report = lint(objects, config)
    drift = assert_type(spread_drift(objects[0], config), Drift)
    nodes = [node(f"n{i}", f"z{i % 2}") for i in range(4)]
    placements = assert_type(simulate(objects, nodes, config), list[Placement])
    findings = assert_type(check(config, nodes, objects), list[Finding])
    writes = assert_type(plan(objects, config), list[Write])
    errors = assert_type(validate_topology_spread_constraints([{"maxSkew": 0}]), list[FieldError])
    volcano = assert_type(validate_volcano_job({"kind": "Job", "metadata": {"name": "j"}, "spec": {}}), list[FieldError])
    try:
        load_config({"hostTopologySpread": {"maxSkw": 1}})
    except ConfigError as e:
        report.append(str(e))
    version: str = policylib.__version__
    pending = sum(p.pending for p in placements)
    print(version, *report, f"needs_rewrite={drift.needs_rewrite}", f"pending={pending}", f"findings={len(findings)}",
          f"writes={len(writes)}", f"field_errors={len(errors)}", f"volcano_errors={len(volcano) > 0}", sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

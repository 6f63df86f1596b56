"""Admission through the real API server: what is stored is exactly what ``policylib preview`` shows."""
from __future__ import annotations

import pytest

from .conftest import CONFIGS
from .harness import deployment, wait_for
from .util import managed, preview

#: What is stored is what the API server of each minor accepts of policylib's mutations.
pytestmark = pytest.mark.minors()

LEGACY_ANTI_AFFINITY = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "legacy"}}, "topologyKey": "kubernetes.io/hostname"}]}}
USER_CONSTRAINT = {"maxSkew": 2, "topologyKey": "example.com/rack", "whenUnsatisfiable": "ScheduleAnyway",
                   "labelSelector": {"matchLabels": {"app": "user"}}}


def cases():
    for config in ("default", "enforce"):
        for replicas in (1, 3, 4, 7, 12):
            yield pytest.param(config, f"r{replicas}", deployment(f"r{replicas}", "NS", replicas),
                               id=f"{config}-{replicas}")
        legacy = deployment("legacy", "NS", 4)
        legacy["spec"]["template"]["spec"]["affinity"] = LEGACY_ANTI_AFFINITY
        yield pytest.param(config, "legacy", legacy, id=f"{config}-legacy-anti-affinity")
        user = deployment("user", "NS", 3)
        user["spec"]["template"]["spec"]["topologySpreadConstraints"] = [USER_CONSTRAINT]
        yield pytest.param(config, "user", user, id=f"{config}-user-constraint")


@pytest.mark.parametrize("config,name,obj", list(cases()))
def test_stored_as_previewed(cluster, webhooks, ns, tmp_path, config, name, obj):
    webhooks(config)
    cluster.namespace(ns, config=config)
    obj["metadata"]["namespace"] = ns
    run = cluster.apply(obj)
    assert "unknown field" not in run.stderr and "duplicate field" not in run.stderr, run.stderr
    stored = cluster.get("deployment", name, ns)
    [expected] = preview([obj], CONFIGS[config], tmp_path)
    assert managed(stored) == managed(expected)
    # Nothing of the user's was lost: the containers and labels are as sent.
    assert stored["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/app:1"
    assert stored["spec"]["template"]["metadata"]["labels"] == obj["spec"]["template"]["metadata"]["labels"]
    if config == "enforce" and name == "r12":
        host = [c for c in stored["spec"]["template"]["spec"]["topologySpreadConstraints"]
                if c["topologyKey"] == "kubernetes.io/hostname"]
        assert host == [{"maxSkew": 4, "minDomains": 3, "topologyKey": "kubernetes.io/hostname",
                         "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "Honor",
                         "labelSelector": {"matchLabels": {"app": "r12"}},
                         "matchLabelKeys": ["pod-template-hash"]}]


def test_hpa_minimum_is_the_effective_count(cluster, webhooks, ns, tmp_path):
    hook = webhooks("enforce")
    cluster.namespace(ns, config="enforce")
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web", "namespace": ns},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 7, "maxReplicas": 20,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                                  "target": {"type": "Utilization", "averageUtilization": 60}}}]}}
    cluster.apply(hpa)
    web = deployment("web", ns, 2)

    def webhook_sees_hpa():
        import json
        run = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(web))
        return json.loads(run.stdout)["metadata"]["annotations"]["policylib.io/spread-effective-replicas"] == "7"
    wait_for(f"webhook {hook.name} sees the HPA", webhook_sees_hpa, timeout=60)
    cluster.apply(web)
    stored = cluster.get("deployment", "web", ns)
    [expected] = preview([hpa, web], CONFIGS["enforce"], tmp_path)
    assert managed(stored) == managed(expected)
    assert stored["metadata"]["annotations"]["policylib.io/spread-effective-replicas"] == "7"

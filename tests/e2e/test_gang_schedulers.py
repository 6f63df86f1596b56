"""Rule D5 on a real API server: ``policylib check --cluster`` names the gang schedulers the cluster runs,
from the scheduler Pods running in any namespace and the API groups it serves, and warns when the one
the gang settings write for is absent.

The shared cluster runs no gang scheduler at first (ACK's never: its Nodes carry no ACK label), so the
default settings (``gang.scheduler: ack``) get the warning. Then a Koordinator scheduler Deployment (the
name and image Koordinator's chart gives it; the fake kubelet runs its Pod) and Volcano's PodGroup CRD
make both present: settings for either get no warning, and the default's names the settings for both.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .harness import SHARED, scope_args, wait_for

POLICYLIB = str(Path(sys.executable).parent / "policylib")   # the installed console script
VOLCANO_PODGROUP_CRD = "schemas/volcano/scheduling.volcano.sh_podgroups.yaml"
KOORD_IMAGE = "ghcr.io/koordinator-sh/koord-scheduler:v1.6.0"


def check(cluster, tmp, config: dict, namespace: str) -> list[dict]:
    cfg = tmp / "check.yaml"
    cfg.write_text(yaml.safe_dump(config))
    run = subprocess.run([POLICYLIB, "check", "--cluster", "--config", str(cfg), "-n", namespace, "-o", "json",
                          *scope_args(cluster)],
                         capture_output=True, text=True, env=cluster.env, timeout=120)
    assert run.returncode in (0, 3), run.stderr   # 3: another test's objects may hold an error finding
    return [f for f in json.loads(run.stdout) if f["key"] in ("gang.scheduler", "gang.operatorGang")]


@pytest.mark.timeout(300)
def test_check_cluster_names_the_gang_schedulers_it_runs_and_warns_on_an_absent_one(cluster, ns, tmp_path):
    if not SHARED.is_dir():
        pytest.skip("../shared/ (Volcano's PodGroup CRD) is not beside the project")
    cluster.namespace(ns)
    found = check(cluster, tmp_path, {}, ns)
    [warning] = [f for f in found if f["severity"] == "warning"]
    assert warning["message"].startswith("gang.scheduler: ack targets ACK's scheduler, which this cluster does not "
                                         "run: the gang metadata written for Kubeflow jobs is read by no scheduler")
    [info] = [f for f in found if f["severity"] == "info"]
    assert info["message"].startswith("gang schedulers this cluster runs: ")
    assert "ack (" not in info["message"] and "koordinator (" not in info["message"]

    cluster.apply({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "koord-scheduler", "namespace": ns},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "koord-scheduler"}},
                            "template": {"metadata": {"labels": {"app": "koord-scheduler"}},
                                         "spec": {"nodeSelector": {"e2e.policylib.io/group": "general"},
                                                  "containers": [{"name": "scheduler", "image": KOORD_IMAGE}]}}}})
    [pod] = wait_for("the scheduler Pod runs",
                     lambda: [p for p in cluster.list("pods", ns, "app=koord-scheduler")
                              if p["status"].get("phase") == "Running"] or None, timeout=120)
    cluster.install_crds(VOLCANO_PODGROUP_CRD)

    found = check(cluster, tmp_path, {"gang": {"scheduler": "koordinator"}}, ns)
    assert [f["severity"] for f in found] == ["info"]
    message = found[0]["message"]
    assert f"koordinator (Pod {ns}/{pod['metadata']['name']} running" in message
    assert "volcano (API scheduling.volcano.sh served)" in message
    assert [f["severity"] for f in check(cluster, tmp_path, {"gang": {"method": "podgroup", "scheduler": "volcano"}},
                                         ns)] == ["info"]
    [warning] = [f for f in check(cluster, tmp_path, {}, ns) if f["severity"] == "warning"]
    assert "set for koordinator, gang.scheduler: koordinator; or " in warning["message"]
    assert warning["message"].endswith("; or for volcano, gang.method: podgroup, gang.scheduler: volcano")
    cluster.kubectl("delete", "namespace", ns, "--wait=false")

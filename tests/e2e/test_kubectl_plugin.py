"""``kubectl policylib`` through the harness's kubectl, against the real API server (docs/integrations.md):
kubectl finds the plugin on PATH, lists it, and passes the user's global flags on (rule L4)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .harness import KUBECTL, ROOT, deployment, scope_args

pytestmark = pytest.mark.timeout(300)
BIN = Path(sys.executable).parent


def kubectl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KUBECTL), *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture
def plugin_env(harness_built, tmp_path) -> dict[str, str]:
    """PATH with the installed console scripts and the harness's kubectl; no kubeconfig but the ones given."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{KUBECTL.parent}{os.pathsep}/usr/bin:/bin",
               KUBECONFIG=str(tmp_path / "absent"))
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return env


def test_kubectl_plugin_list_shows_it_and_preview_runs_through_kubectl(plugin_env):
    listed = kubectl("plugin", "list", env=plugin_env)
    assert listed.returncode == 0, listed.stderr
    assert str(BIN / "kubectl-policylib") in listed.stdout.splitlines()
    args = ["preview", "--config", "docs/examples/enforce.yaml", "-f", "docs/examples/web.yaml", "-o", "diff"]
    through = subprocess.run([str(KUBECTL), "policylib", *args], capture_output=True, text=True, timeout=120,
                             env=plugin_env, cwd=ROOT)
    direct = subprocess.run([str(BIN / "policylib"), *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert (through.returncode, through.stdout) == (0, direct.stdout) and "+        topologyKey: kubernetes.io/hostname" \
        in through.stdout
    gate = subprocess.run([str(KUBECTL), "policylib", *args, "--exit-code"], capture_output=True, text=True,
                          timeout=120, env=plugin_env, cwd=ROOT)
    assert gate.returncode == 1
    # kubectl's own rule, as docs/integrations.md says: no flag before the plugin's name
    before = kubectl("-n", "ml", "policylib", "--version", env=plugin_env)
    assert before.returncode == 1 and "flags cannot be placed before plugin name: -n" in before.stderr


def test_kubectl_policylib_honours_kubeconfig_context_and_namespace(cluster, ns, plugin_env, tmp_path):
    """Two namespaces with a Deployment each; a kubeconfig whose current context points nowhere: only
    ``--kubeconfig``, ``--context`` and ``-n`` (before or after the command) reach the right cluster and
    namespace."""
    other = f"{ns}-other"
    for namespace in (ns, other):
        cluster.namespace(namespace)
        cluster.apply(deployment("web", namespace, replicas=6))
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    real = config["current-context"]
    (cluster_entry,) = [c for c in config["clusters"] if c["name"] == next(
        x["context"]["cluster"] for x in config["contexts"] if x["name"] == real)]
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1",
                                                              **{k: v for k, v in cluster_entry["cluster"].items()
                                                                 if k != "server"}}})
    config["contexts"].append({"name": "nowhere", "context": {**next(
        x["context"] for x in config["contexts"] if x["name"] == real), "cluster": "nowhere"}})
    config["current-context"] = "nowhere"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    drift = tmp_path / "drift.yaml"
    drift.write_text("hostTopologySpread: {reconcileDrift: true}\n")

    scope = scope_args(cluster)   # rule W5: the scope a default install makes

    def plan(*argv: str) -> subprocess.CompletedProcess[str]:
        return kubectl("policylib", *argv, *scope, env=plugin_env)

    for argv in (["plan", "--cluster", "--config", str(drift), "-o", "json", "--kubeconfig", str(kubeconfig),
                  "--context", real, "-n", ns],
                 ["--kubeconfig", str(kubeconfig), f"--context={real}", "--namespace", ns,
                  "plan", "--cluster", "--config", str(drift), "-o", "json"]):
        out = plan(*argv)
        assert out.returncode == 0, out.stderr
        assert {(w["namespace"], w["name"]) for w in json.loads(out.stdout)} == {(ns, "web")}
    # the kubeconfig's own current context points nowhere: the flag is what reached the cluster
    out = plan("plan", "--cluster", "-o", "json", "--kubeconfig", str(kubeconfig), "-n", ns)
    assert out.returncode == 2 and out.stderr.startswith("policylib: error: cannot read the cluster: ")

"""The real kube-scheduler honours what policylib writes: the host skew never exceeds the written
maxSkew, and exactly the documented replicas stay Pending (hostTopologySpread DoNotSchedule,
minDomains 3, hardMinReplicas 3)."""
from __future__ import annotations

import pytest

from .harness import deployment
from .util import host_constraint, per_node, settle_placement

GROUP = "e2e.policylib.io/group"
NODES = {"two": ["two-a", "two-b"], "three": ["three-a", "three-b", "three-c"]}


@pytest.mark.parametrize("group,replicas,max_skew,bound", [
    # 2 eligible nodes < minDomains 3: the global minimum counts as 0, so a node holds at most maxSkew.
    ("two", 3, 1, 2),
    ("two", 4, 2, 4),
    ("two", 12, 4, 8),
    # 3 nodes = minDomains: the real minimum counts, and 12 fit as 4 + 4 + 4.
    ("three", 12, 4, 12),
], ids=["3-on-2-nodes", "4-on-2-nodes", "12-on-2-nodes", "12-on-3-nodes"])
def test_enforced_host_spread(cluster, webhooks, ns, group, replicas, max_skew, bound):
    webhooks("enforce")
    cluster.namespace(ns, config="enforce")
    cluster.apply(deployment("web", ns, replicas, node_selector={GROUP: group}))
    written = host_constraint(cluster.get("deployment", "web", ns))
    assert (written["whenUnsatisfiable"], written["maxSkew"], written["minDomains"]) == ("DoNotSchedule", max_skew, 3)
    pods = settle_placement(cluster, ns, "web", replicas, bound)
    nodes = NODES[group]
    counts = per_node(pods)
    assert set(counts) <= set(nodes)
    per = [counts.get(n, 0) for n in nodes]
    # The skew the scheduler enforces: against the real minimum, or 0 with fewer than minDomains domains.
    global_min = min(per) if len(nodes) >= 3 else 0
    assert max(per) - global_min <= max_skew, counts
    assert sum(per) == bound


def test_untolerated_taint_is_not_a_domain(cluster, webhooks, ns):
    """nodeTaintsPolicy Honor: the tainted node is not counted. With maxSkew 1 (no replica-derived skew)
    6 replicas spread 2 + 2 + 2 over the three untainted nodes; were the tainted node a domain, its
    zero would cap every other node at 1 and leave 3 Pending."""
    webhooks("flat")
    cluster.namespace(ns, config="flat")
    cluster.apply(deployment("web", ns, 6, node_selector={GROUP: "tainted"}))
    written = host_constraint(cluster.get("deployment", "web", ns))
    assert (written["maxSkew"], written["nodeTaintsPolicy"]) == (1, "Honor")
    pods = settle_placement(cluster, ns, "web", 6, 6)
    assert per_node(pods) == {"tainted-a": 2, "tainted-b": 2, "tainted-c": 2}


def test_simulate_and_check_read_the_live_cluster(cluster, tmp_path):
    """``--cluster``: the harness's Nodes (and bound Pods) through kubeconfig, as a platform engineer runs it."""
    import json
    import subprocess
    import sys

    import yaml

    from .harness import ROOT, scope_args
    (tmp_path / "web.yaml").write_text(yaml.safe_dump(deployment("web", "preview", 3, node_selector={GROUP: "two"})))
    (tmp_path / "enforce.yaml").write_text(yaml.safe_dump({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}))
    cli = [sys.executable, "-m", "policylib.cli"]
    run = subprocess.run([*cli, "simulate", "-f", str(tmp_path / "web.yaml"), "--cluster", "--config",
                          str(tmp_path / "enforce.yaml"), "-o", "json"], capture_output=True, text=True, cwd=ROOT,
                         env=cluster.env, timeout=120)
    assert run.returncode == 3, run.stderr
    [placement] = json.loads(run.stdout)
    assert (placement["placed"], placement["pending"]) == ({"two-a": 1, "two-b": 1}, 1)
    run = subprocess.run([*cli, "check", "-f", str(tmp_path / "web.yaml"), "--cluster", "--config",
                          str(tmp_path / "enforce.yaml"), "-o", "json", *scope_args(cluster)],
                         capture_output=True, text=True, cwd=ROOT, env=cluster.env, timeout=120)
    assert run.returncode == 3, run.stderr
    findings = json.loads(run.stdout)
    assert findings[0]["key"] == "hostTopologySpread.minDomains" and "preview/web (2 eligible" in findings[0]["message"]

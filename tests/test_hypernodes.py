"""HyperNodes from node labels, as Volcano's label discovery builds them (seed 001 steps 3-5)."""
import random
import subprocess
import sys
from pathlib import Path

import yaml

from policylib import load_config
from policylib.hypernodes import SOURCE_LABEL, discover_hypernodes, leaf_nodes, render_tree
from tests.crd import assert_valid
from tests.test_volcano import DISCOVERY, seed_nodes

HN_CRD = ("schemas", "volcano", "topology.volcano.sh_hypernodes.yaml")
SOURCES = load_config({"volcano": {"networkTopologyDiscovery": DISCOVERY}}).volcano.networkTopologyDiscovery


def by_value(hypernodes):
    return {h["metadata"]["labels"][h["spec"]["tierName"]]: h for h in hypernodes}


def members(h):
    return sorted(m["selector"]["exactMatch"]["name"] for m in h["spec"]["members"])


def test_seed_example_gives_the_seed_seven_hypernodes():
    hns = discover_hypernodes(seed_nodes(), SOURCES)
    assert [(h["spec"]["tier"], h["spec"]["tierName"]) for h in hns] == \
        [(1, "test-tier-1")] * 4 + [(2, "test-tier-2")] * 2 + [(3, "test-tier-3")]
    assert all(len(h["spec"]["members"]) == 2 for h in hns)  # the seed's NODECOUNT column
    v = by_value(hns)
    assert members(v["HyperNode0"]) == ["192.168.5.17", "192.168.5.224"]
    assert members(v["HyperNode3"]) == ["192.168.5.83", "192.168.5.95"]
    assert members(v["HyperNode4"]) == sorted([v["HyperNode0"]["metadata"]["name"], v["HyperNode1"]["metadata"]["name"]])
    assert members(v["HyperNode6"]) == sorted([v["HyperNode4"]["metadata"]["name"], v["HyperNode5"]["metadata"]["name"]])
    assert {m["type"] for m in v["HyperNode0"]["spec"]["members"]} == {"Node"}
    assert {m["type"] for m in v["HyperNode6"]["spec"]["members"]} == {"HyperNode"}
    assert v["HyperNode6"]["metadata"]["labels"] == {SOURCE_LABEL: "label", "test-tier-3": "HyperNode6"}
    assert all(h["metadata"]["name"].startswith(f"hypernode-testtopology-tier{h['spec']['tier']}-") for h in hns)
    assert leaf_nodes(hns)[v["HyperNode6"]["metadata"]["name"]] == sorted(n["metadata"]["name"] for n in seed_nodes())
    for h in hns:
        assert_valid(h, *HN_CRD)


def test_names_are_stable_across_runs_and_input_order():
    nodes = seed_nodes()
    first = discover_hypernodes(nodes, SOURCES)
    random.Random(7).shuffle(nodes)
    assert discover_hypernodes(nodes, SOURCES) == first


def test_walk_stops_at_the_first_missing_label():
    nodes = seed_nodes()
    del nodes[0]["metadata"]["labels"]["test-tier-1"]      # joins nothing
    del nodes[7]["metadata"]["labels"]["test-tier-2"]      # joins its tier-1 only
    v = by_value(discover_hypernodes(nodes, SOURCES))
    assert members(v["HyperNode0"]) == ["192.168.5.224"]
    assert members(v["HyperNode3"]) == ["192.168.5.83", "192.168.5.95"]
    assert all("192.168.5.17" not in members(h) for h in v.values())


def test_the_node_level_entry_is_never_read():
    nodes = seed_nodes()
    for n in nodes:
        n["metadata"]["labels"]["kubernetes.io/hostname"] = "same-for-all"
    assert len(discover_hypernodes(nodes, SOURCES)) == 7


def test_disabled_or_other_sources_build_nothing():
    off = load_config({"volcano": {"networkTopologyDiscovery": [dict(DISCOVERY[0], enabled=False),
                                                                {"source": "ufm", "enabled": True}]}})
    assert discover_hypernodes(seed_nodes(), off.volcano.networkTopologyDiscovery) == []


def test_tree_draws_the_hierarchy():
    text = render_tree(discover_hypernodes(seed_nodes(), SOURCES))
    lines = text.splitlines()
    assert lines[0].startswith("hypernode-testtopology-tier3-") and lines[0].endswith("(tier 3, test-tier-3=HyperNode6)")
    assert len(lines) == 1 + 2 + 4 + 8
    assert sum(line.lstrip("│ ").startswith(("├── 192.", "└── 192.")) for line in lines) == 8


def test_hypernodes_cli(tmp_path):
    exe = str(Path(sys.executable).parent / "policylib")
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": seed_nodes()}))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"volcano": {"networkTopologyDiscovery": DISCOVERY}}))
    out = subprocess.run([exe, "hypernodes", "-f", str(tmp_path / "nodes.yaml"), "--config", str(tmp_path / "c.yaml")],
                         capture_output=True, text=True, check=True)
    assert list(yaml.safe_load_all(out.stdout)) == discover_hypernodes(seed_nodes(), SOURCES)
    tree = subprocess.run([exe, "hypernodes", "-f", str(tmp_path / "nodes.yaml"), "--config", str(tmp_path / "c.yaml"),
                           "-o", "tree"], capture_output=True, text=True, check=True)
    assert tree.stdout == render_tree(discover_hypernodes(seed_nodes(), SOURCES))
    none = subprocess.run([exe, "hypernodes", "-f", str(tmp_path / "nodes.yaml")], capture_output=True, text=True)
    assert none.returncode == 2 and "no enabled 'label' source in volcano.networkTopologyDiscovery" in none.stderr

"""Rule C8: the checks across settings are data, and the config schema carries them as ``if``/``then``, so a
validator of the schema alone (the Helm chart's values.schema.json, made from it) refuses exactly what loading
refuses. Every combination is tried both ways against loading, the config schema and the chart's schema."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from jsonschema import Draft7Validator, Draft202012Validator

from policylib import ConfigError, load_config
from policylib.config import (
    GANG_COMBINATIONS,
    GANG_METHODS,
    GANG_SCHEDULERS,
    MATCH_POLICIES,
    OPERATOR_GANG_MODES,
    UNENFORCED_TIER_NAME_VERSION,
    config_schema,
)
from policylib.volcano_api.partitions import partition_tier_name_enforced

ROOT = Path(__file__).resolve().parents[1]
CONFIG = Draft202012Validator(config_schema())
CHART = Draft7Validator(json.loads((ROOT / "charts" / "policylib" / "values.schema.json").read_text()))
ABSENT = object()
GANG_CHOICES = {"method": GANG_METHODS, "scheduler": GANG_SCHEDULERS, "matchPolicy": MATCH_POLICIES,
                "groupByRole": (False, True), "operatorGang": OPERATOR_GANG_MODES, "topology": ("none", "zone")}


def loads(config: dict) -> bool:
    try:
        load_config(config)
    except ConfigError:
        return False
    return True


def nested(config: dict) -> dict:
    return {"lrs-operator": {"operator": {"config": config}}}


def agree(config: dict) -> bool:
    """Loading, the config schema and the chart's schema (both forms of `config:`) say the same of ``config``."""
    accepted = loads(config)
    assert CONFIG.is_valid(config) is accepted, config
    assert CHART.is_valid({"config": config}) is accepted, config
    assert CHART.is_valid({"config": nested(config)}) is accepted, config
    return accepted


def section(keys: tuple[str, ...], values: tuple) -> dict:
    return {k: v for k, v in zip(keys, values, strict=True) if v is not ABSENT}


def test_every_gang_combination_is_refused_by_loading_and_by_both_schemas_alike():
    keys = tuple(GANG_CHOICES)
    outcomes = [agree({"gang": section(keys, values)})
                for values in itertools.product(*((ABSENT, *GANG_CHOICES[k]) for k in keys))]
    assert len(outcomes) == 5 * 6 * 6 * 3 * 4 * 3 and 0 < sum(outcomes) < len(outcomes)


def _accepted_with(combination, allowed: bool) -> dict:
    """The first whole gang section (every key given) where ``combination``'s conditions hold and its key has an
    allowed value (``allowed``) or not, that every other rule accepts."""
    keys = tuple(GANG_CHOICES)
    for values in itertools.product(*(GANG_CHOICES[k] for k in keys)):
        gang = dict(zip(keys, values, strict=True))
        if not all(gang[k] in vs for k, vs in combination.when) or (gang[combination.key] in combination.allowed) != allowed:
            continue
        if all(not c.refuses(gang) for c in GANG_COMBINATIONS if c is not combination):
            return gang
    raise AssertionError(f"no gang section shows {combination}")


@pytest.mark.parametrize("combination", GANG_COMBINATIONS, ids=lambda c: f"{c.rule}-{c.key}-when-"
                         + "-".join(f"{k}={vs[0]}" for k, vs in c.when))
def test_each_gang_rule_both_ways(combination):
    good, bad = _accepted_with(combination, True), _accepted_with(combination, False)
    assert agree({"gang": good}) is True
    assert agree({"gang": bad}) is False
    with pytest.raises(ConfigError) as refused:
        load_config({"gang": bad})
    assert refused.value.path == " and ".join(f"gang.{k}" for k in combination.names)
    assert combination.message.format(**bad) in str(refused.value)


def test_gang_method_workload_with_the_default_scheduler_is_refused_by_the_charts_schema():
    assert not CHART.is_valid({"config": {"gang": {"method": "workload"}}})
    assert CHART.is_valid({"config": {"gang": {"method": "workload", "scheduler": "kube-scheduler"}}})


TOPOLOGIES = (ABSENT, None, {"mode": "soft"}, {"mode": "soft", "highestTierAllowed": 1}, {"mode": "hard"},
              {"highestTierAllowed": 1}, {"highestTierAllowed": None}, {"highestTierName": "t"},
              {"highestTierAllowed": None, "highestTierName": "t"}, {"mode": "soft", "highestTierName": "t"},
              {"mode": "hard", "highestTierAllowed": 2, "highestTierName": "t"}, {"highestTierName": ""})


def test_every_volcano_topology_partition_and_version_combination_agrees():
    keys = ("partitionSize", "networkTopology", "version")
    choices = ((ABSENT, None, 4), TOPOLOGIES, (ABSENT, "v1.14.1", "1.14.0", "v1.15.0", "v1.16.2", "v01.014.3"))
    outcomes = [agree({"volcano": section(keys, values)}) for values in itertools.product(*choices)]
    assert 0 < sum(outcomes) < len(outcomes)


@pytest.mark.parametrize("volcano, accepted", [
    ({"partitionSize": 2, "networkTopology": {"mode": "soft"}}, False),                       # V5
    ({"partitionSize": 2, "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}, True),
    ({"networkTopology": {"mode": "soft"}}, True),
    ({"networkTopology": {"highestTierAllowed": 1, "highestTierName": "x"}}, False),          # V4, exclusive
    ({"networkTopology": {"highestTierName": "x"}}, True),
    ({"networkTopology": {"mode": "hard"}}, False),                                           # V4, a tier bound
    ({"networkTopology": {"mode": "hard", "highestTierName": "x"}}, True),
    ({"partitionSize": 2, "version": "v1.14.2", "networkTopology": {"highestTierName": "x"}}, False),  # V20
    ({"partitionSize": 2, "version": "v1.15.0", "networkTopology": {"highestTierName": "x"}}, True),
    ({"version": "v1.14.2", "networkTopology": {"highestTierName": "x"}}, True),
])
def test_each_volcano_rule_both_ways(volcano, accepted):
    assert agree({"volcano": volcano}) is accepted


@pytest.mark.parametrize("events", [[], None, ["PodFailed"], ["PodEvicted", "PodFailed"], ["PodFailed", "PodFailed"],
                                    ["*"], ["*", "PodFailed"], ["*", "*"], ["PodEvicted", "*"]])
def test_restart_partition_events_agree(events):
    agree({"volcano": {"restartPartitionEvents": events}})


def test_the_tier_name_version_pattern_is_the_release_rule():
    import re
    pattern = re.compile(UNENFORCED_TIER_NAME_VERSION)
    for major, minor, patch in itertools.product(("1", "01"), ("14", "014", "15", "16", "20"), ("0", "3", "10")):
        for v in ("", "v"):
            version = f"{v}{major}.{minor}.{patch}"
            assert bool(pattern.search(version)) is (not partition_tier_name_enforced(version)), version


def test_every_spread_topology_key_combination_agrees_but_two_equal_keys_given():
    """Two keys given with the same value cannot be said in JSON Schema (the chart's templates refuse them:
    tests/test_chart.py); every other combination agrees."""
    zone_default, host_default = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
    keys = (ABSENT, zone_default, host_default, "rack")
    for zone_on, host_on, zone_key, host_key in itertools.product((ABSENT, True, False), (ABSENT, True, False),
                                                                   keys, keys):
        config = {"zoneTopologySpread": section(("enabled", "topologyKey"), (zone_on, zone_key)),
                  "hostTopologySpread": section(("enabled", "topologyKey"), (host_on, host_key))}
        if zone_key is not ABSENT and zone_key == host_key:
            assert CHART.is_valid({"config": config})
            assert loads(config) is (zone_on is False or host_on is False)
            continue
        agree(config)
    assert not loads({"hostTopologySpread": {"topologyKey": zone_default}})
    assert not CHART.is_valid({"config": {"hostTopologySpread": {"topologyKey": zone_default}}})

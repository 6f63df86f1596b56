"""load_config: the seed's YAML, Helm nesting, defaults and errors (seed 000 "Default values")."""
import re
import textwrap
from dataclasses import fields

import pytest

from policylib import ConfigError, load_config
from policylib.config import GANG_METHODS, Config, HostSpread, ZoneSpread

SEED_DEFAULTS = textwrap.dedent("""\
    lrs-operator:
      operator:
        config:
          zoneTopologySpread:
            enabled: true
            topologyKey: topology.kubernetes.io/zone
            maxSkew: 1
            matchLabelKeys: pod-template-hash
          hostTopologySpread:
            enabled: true
            whenUnsatisfiable: ScheduleAnyway
            topologyKey: kubernetes.io/hostname
            maxSkew: 1
            minDomains: 3
            hardMinReplicas: 3
            enableReplicaDerivedMaxSkewRule: true
            matchLabelKeys: pod-template-hash
            reconcileDrift: false
    """)


def test_none_gives_the_seed_defaults():
    c = load_config(None)
    assert c.zone == ZoneSpread(True, "topology.kubernetes.io/zone", 1, ("pod-template-hash",))
    assert c.host == HostSpread(True, "ScheduleAnyway", "kubernetes.io/hostname", 1, 3, 3, True,
                                ("pod-template-hash",), False)
    assert c.removePodAntiAffinity == "own"


def test_seed_default_block_as_helm_values_file_equals_defaults(tmp_path):
    path = tmp_path / "values.yaml"
    path.write_text(SEED_DEFAULTS)
    assert load_config(path) == Config()
    assert load_config(str(path)) == Config()


def test_top_level_form_and_missing_keys_take_defaults():
    c = load_config({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "minDomains": 3,
                                            "hardMinReplicas": 3}})
    assert c.host.whenUnsatisfiable == "DoNotSchedule"
    assert c.host.maxSkew == 1 and c.host.topologyKey == "kubernetes.io/hostname"
    assert c.zone == ZoneSpread()


def test_seed_example_turn_off_both_spreads():
    c = load_config({"lrs-operator": {"operator": {"config": {
        "zoneTopologySpread": {"enabled": False}, "hostTopologySpread": {"enabled": False}}}}})
    assert (c.zone.enabled, c.host.enabled) == (False, False)


def test_helm_values_other_operator_keys_are_ignored():
    c = load_config({"lrs-operator": {"image": "x", "operator": {"replicas": 2, "config": {
        "logLevel": "debug", "hostTopologySpread": {"maxSkew": 2}}}}})
    assert c.host.maxSkew == 2


@pytest.mark.parametrize("value,expected", [
    ("pod-template-hash", ("pod-template-hash",)),
    ("none", ()),
    (["pod-template-hash", "example.com/rev"], ("pod-template-hash", "example.com/rev")),
    ([], ()),
])
def test_match_label_keys_forms(value, expected):
    assert load_config({"zoneTopologySpread": {"matchLabelKeys": value}}).zone.matchLabelKeys == expected


@pytest.mark.parametrize("data,path,fragment", [
    ({"hostTopologySpread": {"maxSkew": 0}}, "hostTopologySpread.maxSkew", "integer >= 1"),
    ({"zoneTopologySpread": {"maxSkew": -1}}, "zoneTopologySpread.maxSkew", "integer >= 1"),
    ({"hostTopologySpread": {"minDomains": 0}}, "hostTopologySpread.minDomains", "integer >= 1"),
    ({"hostTopologySpread": {"hardMinReplicas": 0}}, "hostTopologySpread.hardMinReplicas", "integer >= 1"),
    ({"hostTopologySpread": {"maxSkew": "2"}}, "hostTopologySpread.maxSkew", "got '2'"),
    ({"hostTopologySpread": {"maxSkew": True}}, "hostTopologySpread.maxSkew", "got True"),
    ({"hostTopologySpread": {"whenUnsatisfiable": "Never"}}, "hostTopologySpread.whenUnsatisfiable",
     "DoNotSchedule, ScheduleAnyway"),
    ({"zoneTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}, "zoneTopologySpread.whenUnsatisfiable",
     "always ScheduleAnyway"),
    ({"hostTopologySpread": {"enabled": "yes"}}, "hostTopologySpread.enabled", "true or false"),
    ({"hostTopologySpread": {"reconcileDrift": 1}}, "hostTopologySpread.reconcileDrift", "true or false"),
    ({"hostTopologySpread": {"maxSkw": 1}}, "hostTopologySpread.maxSkw", "did you mean 'maxSkew'"),
    ({"zoneTopologySpred": {}}, "zoneTopologySpred", "did you mean 'zoneTopologySpread'"),
    ({"hostTopologySpread": {"matchLabelKeys": "bad key!"}}, "hostTopologySpread.matchLabelKeys",
     "not a valid label key"),
    ({"hostTopologySpread": {"matchLabelKeys": ["a", "a"]}}, "hostTopologySpread.matchLabelKeys", "twice"),
    ({"hostTopologySpread": {"topologyKey": ""}}, "hostTopologySpread.topologyKey", "non-empty"),
    ({"hostTopologySpread": {"topologyKey": "topology.kubernetes.io/zone"}}, "hostTopologySpread.topologyKey",
     "must differ"),
    ({"removePodAntiAffinity": "some"}, "removePodAntiAffinity", "'own'"),
    ({"hostTopologySpread": []}, "hostTopologySpread", "must be a mapping"),
    ({"webhook": {"failureMode": "maybe"}}, "webhook.failureMode", "'open'"),
])
def test_bad_settings_name_the_key_path_and_what_is_allowed(data, path, fragment):
    with pytest.raises(ConfigError) as e:
        load_config(data)
    assert e.value.path == path
    assert fragment in e.value.message


def test_helm_nested_errors_carry_the_full_path():
    with pytest.raises(ConfigError) as e:
        load_config({"lrs-operator": {"operator": {"config": {"hostTopologySpread": {"minDomains": 0}}}}})
    assert e.value.path == "lrs-operator.operator.config.hostTopologySpread.minDomains"


def test_helm_near_miss_top_level_key_is_an_error():
    with pytest.raises(ConfigError, match="did you mean 'hostTopologySpread'"):
        load_config({"lrs-operator": {"operator": {"config": {"hostTopologySpred": {}}}}})


def test_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("hostTopologySpread: [\n")
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    assert str(bad) in str(e.value) and "invalid YAML" in str(e.value)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_fingerprint_tracks_what_is_written_not_reconcile_drift():
    base = load_config(None)
    assert base.spread_fingerprint() == load_config({"hostTopologySpread": {"reconcileDrift": True}}).spread_fingerprint()
    assert base.spread_fingerprint() != load_config({"hostTopologySpread": {"maxSkew": 2}}).spread_fingerprint()


# --- volcano section (issue: Volcano Jobs) ------------------------------------------

def test_volcano_defaults_and_seed_discovery_list():
    from policylib.config import NetworkTopology
    v = load_config(None).volcano
    assert v.restartPartitionEvents == ("PodEvicted", "PodFailed") and v.partitionSize is None
    assert v.networkTopology == NetworkTopology("hard", 1, None)
    seeded = load_config({"volcano": {"networkTopologyDiscovery": [{"source": "label", "enabled": True, "config": {
        "networkTopologyTypes": {"testtopology": [{"nodeLabel": "test-tier-3"}, {"nodeLabel": "test-tier-2"},
                                                  {"nodeLabel": "test-tier-1"},
                                                  {"nodeLabel": "kubernetes.io/hostname"}]}}}]}}).volcano
    src = seeded.networkTopologyDiscovery[0]
    assert (src.source, src.enabled) == ("label", True)
    assert src.topologies == (("testtopology", ("test-tier-3", "test-tier-2", "test-tier-1", "kubernetes.io/hostname")),)


@pytest.mark.parametrize("volcano,path,fragment", [
    ({"partitionSize": 2, "networkTopology": {"mode": "soft"}}, "volcano.networkTopology.mode", "soft mode is not supported"),
    ({"networkTopology": {"highestTierAllowed": 1, "highestTierName": "x"}}, "volcano.networkTopology", "exclusive"),
    ({"networkTopology": {"mode": "hard", "highestTierAllowed": None}}, "volcano.networkTopology", "silently"),
    ({"partitionSize": 0}, "volcano.partitionSize", "integer >= 1"),
    ({"restartPartitionEvents": ["PodKilled"]}, "volcano.restartPartitionEvents[0]",
     'Unsupported value: "PodKilled": supported values: "*"'),
    ({"restartPartitionEvents": ["*", "PodFailed"]}, "volcano.restartPartitionEvents", "must stand alone"),
    ({"networkTopologyDiscovery": [{"source": "label", "config": {"networkTopologyTypes": {
        "t": [{"nodeLabel": "tier-1"}, {"nodeLabel": "rack"}]}}}]},
     "volcano.networkTopologyDiscovery[0].config.networkTopologyTypes.t[1].nodeLabel", "kubernetes.io/hostname"),
    ({"networkTopologyDiscovery": [{"source": "label", "config": {"networkTopologyTypes": {
        "a-very-long-topology-name": [{"nodeLabel": "x"}, {"nodeLabel": "kubernetes.io/hostname"}]}}}]},
     "volcano.networkTopologyDiscovery[0].config.networkTopologyTypes.a-very-long-topology-name", "1 to 20"),
])
def test_bad_volcano_settings(volcano, path, fragment):
    with pytest.raises(ConfigError) as e:
        load_config({"volcano": volcano})
    assert e.value.path == path and fragment in e.value.message


def test_upstream_docs_discovery_config_with_two_topologies_and_other_sources_loads():
    from tests.helpers import shared_path
    path = shared_path("examples", "volcano", "hypernode-discovery-configmap.from-docs.yaml")
    if not path.exists():
        pytest.skip(f"{path} not found: upstream examples live in ../shared beside the project")
    import yaml
    conf = yaml.safe_load(yaml.safe_load(path.read_text())["data"]["volcano-controller.conf"])
    v = load_config({"volcano": conf}).volcano
    label = [s for s in v.networkTopologyDiscovery if s.source == "label"][0]
    assert [name for name, _ in label.topologies] == ["topologyA2", "topologyA3"]
    assert [s.source for s in v.networkTopologyDiscovery] == ["ufm", "roce", "label"]


def test_sections_beside_helm_nesting_are_an_error_not_ignored():
    with pytest.raises(ConfigError) as e:
        load_config({"lrs-operator": {"operator": {"config": {}}}, "volcano": {"partitionSize": 2}})
    assert e.value.path == "volcano" and "beside lrs-operator" in e.value.message


@pytest.mark.parametrize("value,expected", [("v1.15.1", "v1.15.1"), ("1.14.3", "v1.14.3"), ("v1.16.0", "v1.16.0")])
def test_volcano_version(value, expected):
    assert load_config({"volcano": {"version": value}}).volcano.version == expected


@pytest.mark.parametrize("value,message", [
    ("latest", "volcano.version: must be a Volcano release like v1.15.1, got 'latest'"),
    (1.15, "volcano.version: must be a Volcano release like v1.15.1, got 1.15"),
    ("v1.13.0", "volcano.version: must be v1.14.0 or newer (partitionPolicy and RestartPartition), got 'v1.13.0'"),
])
def test_volcano_version_errors(value, message):
    with pytest.raises(ConfigError) as e:
        load_config({"volcano": {"version": value}})
    assert str(e.value) == message


@pytest.mark.parametrize("gang,message", [
    ({"method": "koordinator", "scheduler": "ack", "matchPolicy": "only-waiting"},
     "gang.matchPolicy and gang.method: gang.matchPolicy 'only-waiting' is not supported with gang.method koordinator "
     "on scheduler ack (supported: once-satisfied)"),
    ({"method": "podgroup", "scheduler": "scheduler-plugins", "matchPolicy": "waiting-and-running"},
     "gang.matchPolicy and gang.scheduler: gang.matchPolicy 'waiting-and-running' is not supported on scheduler "
     "'scheduler-plugins': its coscheduling has no match policy (supported: none)"),
    ({"method": "labels", "scheduler": "koordinator", "matchPolicy": "waiting-running-succeed"},
     "gang.matchPolicy and gang.scheduler: gang.matchPolicy 'waiting-running-succeed' is not supported on scheduler "
     "'koordinator': it is an ACK-only match policy (supported: none, only-waiting, waiting-and-running, "
     "once-satisfied)"),
    ({"method": "labels", "scheduler": "scheduler-plugins"},
     "gang.method and gang.scheduler: gang.method 'labels' is not supported on scheduler 'scheduler-plugins': the "
     "lightweight pod-group.scheduling.sigs.k8s.io/name labels work on ACK and Koordinator only (supported there: "
     "podgroup)"),
    ({"method": "podgroup", "scheduler": "scheduler-plugins", "groupByRole": True},
     "gang.groupByRole and gang.scheduler: gang.groupByRole true is not supported on scheduler 'scheduler-plugins': "
     "it has no GangGroup (supported: false)"),
    ({"method": "sometimes"}, "gang.method: must be one of labels, podgroup, koordinator, workload; got 'sometimes'"),
])
def test_one_of_errors_name_the_value(gang, message):
    with pytest.raises(ConfigError) as e:
        load_config({"gang": gang})
    assert str(e.value) == message


def test_family_switches_leave_their_kinds_alone():
    from policylib import mutate
    from policylib.plan import plan
    from tests.test_plan import tfjob
    from tests.test_volcano import job, task
    off = load_config({"volcano": {"enabled": False, "partitionSize": 2}, "gang": {"enabled": False, "method": "podgroup",
                                                                                  "scheduler": "scheduler-plugins"}})
    vj, tf = job(task(replicas=4)), tfjob()
    for obj, reason in ((vj, "Volcano policies are off (volcano.enabled: false): left unchanged"),
                        (tf, "gang policies are off (gang.enabled: false): left unchanged")):
        r = mutate(obj, off)
        assert (r.object, r.patch, r.reasons) == (obj, [], [reason])
    assert plan([tf], off) == []
    on = load_config({"volcano": {"partitionSize": 2}})
    assert mutate(vj, on).patch
    assert load_config(None).volcano.enabled is True and load_config(None).gang.enabled is True


def test_integers_past_int32_are_config_errors():
    with pytest.raises(ConfigError) as e:
        load_config({"hostTopologySpread": {"maxSkew": 2**31}})
    assert str(e.value) == "hostTopologySpread.maxSkew: must be at most 2147483647 (the API's int32 fields), got 2147483648"


# --- the schema: one source of the configuration's shape (rules C6, C7) ------------------------------

def _settings(schema):
    """(path, property schema) of every setting: the scalars and each section's keys."""
    for name, prop in schema["properties"].items():
        if "properties" in prop and "object" in prop["type"]:
            for key, sub in prop["properties"].items():
                yield f"{name}.{key}", sub
        else:
            yield name, prop


def test_config_schema_is_a_valid_draft_2020_12_schema_with_every_annotation():
    from jsonschema import Draft202012Validator

    from policylib.config import config_schema
    schema = config_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    for name, prop in schema["properties"].items():
        assert {"type", "default", "description", "x-rule"} <= set(prop), name
        if "properties" in prop:
            assert prop["additionalProperties"] is False, name
    paths = []
    for path, prop in _settings(schema):
        paths.append(path)
        assert {"type", "default", "description", "x-rule"} <= set(prop), path
        assert prop["x-rule"] is None or re.fullmatch(r"[A-Z]\d+(, [A-Z]\d+)*", prop["x-rule"]), path
    assert "hostTopologySpread.whenUnsatisfiable" in paths and "gang.method" in paths
    enums = dict(_settings(schema))
    assert enums["gang.method"]["enum"] == list(GANG_METHODS)
    assert enums["hostTopologySpread.whenUnsatisfiable"]["enum"] == ["DoNotSchedule", "ScheduleAnyway"]
    assert enums["removePodAntiAffinity"]["enum"] == ["own", "all"]


def test_schema_defaults_are_the_dataclass_defaults():
    """The schema's defaults, given as a document, load to Config(); every stored field has a property."""
    from policylib.config import config_schema, section_classes
    schema = config_schema()
    document = {}
    for name, prop in schema["properties"].items():
        if "properties" in prop:
            document[name] = {k: sub["default"] for k, sub in prop["properties"].items()}
        else:
            document[name] = prop["default"]
    assert load_config(document) == Config()
    for name, cls in section_classes().items():
        stored = {f.name for f in fields(cls)}
        assert stored <= set(schema["properties"][name]["properties"]), name
        for f in fields(cls):
            one = load_config({name: {f.name: schema["properties"][name]["properties"][f.name]["default"]}})
            assert getattr(getattr(one, name), f.name) == getattr(getattr(Config(), name), f.name), f"{name}.{f.name}"
    config_fields = {f.name for f in fields(Config)}
    assert config_fields == set(schema["properties"])


def test_a_config_with_three_mistakes_reports_all_three():
    with pytest.raises(ConfigError) as e:
        load_config({"hostTopologySpread": {"maxSkew": 0, "minDomain": 3}, "gang": {"method": "sometimes"},
                     "volcano": {"restartPartitionEvents": ["*", "PodFailed"]}})
    assert [(x.field, x.type.reason) for x in e.value.errors] == [
        ("gang.method", "FieldValueInvalid"),
        ("hostTopologySpread.maxSkew", "FieldValueInvalid"),
        ("hostTopologySpread.minDomain", "FieldValueNotSupported"),
        ("volcano.restartPartitionEvents", "FieldValueInvalid"),
    ]
    assert str(e.value) == (
        "gang.method: must be one of labels, podgroup, koordinator, workload; got 'sometimes'; "
        "hostTopologySpread.maxSkew: must be an integer >= 1, got 0; "
        "hostTopologySpread.minDomain: unknown key; did you mean 'minDomains'?; "
        "volcano.restartPartitionEvents: Invalid value: [\"*\", \"PodFailed\"]: '*' covers every event and must "
        "stand alone")


def test_schema_errors_and_cross_setting_errors_come_together():
    with pytest.raises(ConfigError) as e:
        load_config({"lrs-operator": {"operator": {"config": {
            "hostTopologySpread": {"topologyKey": "topology.kubernetes.io/zone"},
            "gang": {"method": "labels", "scheduler": "scheduler-plugins"}, "webhook": {"failureMode": "maybe"}}}}})
    assert [x.field for x in e.value.errors] == ["webhook.failureMode", "gang.method and gang.scheduler",
                                                 "hostTopologySpread.topologyKey"]
    assert e.value.path == "lrs-operator.operator.config.webhook.failureMode"
    assert "; lrs-operator.operator.config.hostTopologySpread.topologyKey: must differ" in e.value.message


def test_a_bad_section_does_not_hide_the_others():
    with pytest.raises(ConfigError) as e:
        load_config({"gang": [], "volcano": {"partitionSize": 2, "networkTopology": {"mode": "soft"}}})
    assert [x.field for x in e.value.errors] == ["gang", "volcano.networkTopology.mode"]


def test_the_cli_prints_every_config_error(tmp_path):
    import io

    from policylib.cli import EXIT_ERROR, main
    bad = tmp_path / "config.yaml"
    bad.write_text("hostTopologySpread:\n  maxSkew: 0\ngang:\n  method: sometimes\n")
    manifest = tmp_path / "d.yaml"
    manifest.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {}\n")
    out, err = io.StringIO(), io.StringIO()
    assert main(["preview", "-f", str(manifest), "--config", str(bad)], stdout=out, stderr=err) == EXIT_ERROR
    assert err.getvalue() == (f"policylib: error: {bad}: gang.method: must be one of labels, podgroup, koordinator, workload; "
                              "got 'sometimes'; hostTopologySpread.maxSkew: must be an integer >= 1, got 0\n")


@pytest.mark.parametrize("command", [["controller", "--kubeconfig", "/nonexistent"], ["serve", "--cert-dir", "certs"]])
def test_the_webhook_and_the_controller_print_every_config_error(tmp_path, command):
    import subprocess
    import sys
    bad = tmp_path / "config.yaml"
    bad.write_text("hostTopologySpread:\n  maxSkew: 0\ngang:\n  method: sometimes\n")
    run = subprocess.run([sys.executable, "-m", "webhook", *command, "--config", str(bad)], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        f"webhook: error: {bad}: gang.method: must be one of labels, podgroup, koordinator, workload; got 'sometimes'; "
        "hostTopologySpread.maxSkew: must be an integer >= 1, got 0")

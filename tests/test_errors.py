"""Field paths and field errors render as the API server renders them; a policy that cannot proceed
raises one PolicyError carrying every error."""
import pytest

from policylib import PolicyError, load_config, mutate
from policylib.errors import (
    ErrorType,
    FieldError,
    FieldPath,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    object_ref,
    required,
    too_many,
)


def test_field_path_renders_like_field_path_string():
    assert str(FieldPath("spec").child("containers").index(0).child("name")) == "spec.containers[0].name"
    assert str(FieldPath("metadata", "labels").key("app")) == "metadata.labels[app]"
    assert str(FieldPath("spec", "template", "spec")) == "spec.template.spec"
    assert str(FieldPath("spec").child("a", "b").index(2).index(3)) == "spec.a.b[2][3]"
    assert FieldPath("spec").child("x") == "spec.x"


@pytest.mark.parametrize("error,text", [
    (invalid("spec.containers[0].name", "x", "detail"), 'spec.containers[0].name: Invalid value: "x": detail'),
    (invalid("spec.replicas", 5, "must be even"), "spec.replicas: Invalid value: 5: must be even"),
    (invalid("spec.paused", True, "no"), "spec.paused: Invalid value: true: no"),
    (invalid("metadata", None, "must be an object"), "metadata: Invalid value: null: must be an object"),
    (not_supported("spec.mode", "x", ["a", "b"]), 'spec.mode: Unsupported value: "x": supported values: "a", "b"'),
    (required("spec.selector"), "spec.selector: Required value"),
    (required("spec", "needs one"), "spec: Required value: needs one"),
    (forbidden("spec.policies[0].action", "not here"), "spec.policies[0].action: Forbidden: not here"),
    (FieldError(ErrorType.TOO_LONG, "metadata.name", "x" * 300, "must have at most 253 bytes"),
     "metadata.name: Too long: must have at most 253 bytes"),
    (duplicate("spec.tasks[1].name", "t0"), 'spec.tasks[1].name: Duplicate value: "t0"'),
])
def test_field_errors_render_like_field_error(error, text):
    assert str(error) == text
    assert error.type in ErrorType


def test_a_quoted_value_a_map_key_and_a_name_are_cut_and_marked():
    """Rule P8: a message quotes at most 64 characters of a client's value (a string's first ones, quoted, then
    ``...``; a map or list encoded only that far), of a map key in a field path, and at most 253 of a name."""
    big = "a" * 5_000_000
    assert str(invalid("spec.x", big, "bad")) == f'spec.x: Invalid value: "{"a" * 64}"...: bad'
    assert str(invalid("spec.x", "a" * 64, "bad")) == f'spec.x: Invalid value: "{"a" * 64}": bad'
    assert str(invalid("spec.x", {"k": [big]}, "must be a list")) == \
        f'spec.x: Invalid value: {{"k": ["{"a" * 56}...: must be a list'
    assert str(invalid("spec.x", list(range(10**6)), "bad")).startswith("spec.x: Invalid value: [0, 1, 2, ")
    assert len(str(invalid("spec.x", list(range(10**6)), "bad"))) < 120
    assert str(FieldPath("metadata", "labels").key(big)) == f"metadata.labels[{'a' * 64}...]"
    assert str(too_many("spec.tasks", 3000, 1)) == "spec.tasks: Too many: 3000: must have at most 1 item"
    huge = {"apiVersion": "apps/v1", "kind": "K" * 100, "metadata": {"name": "n" * 300, "namespace": "s" * 300}}
    assert object_ref(huge) == f"{'K' * 64}... {'s' * 253}.../{'n' * 253}..."


def test_a_message_lists_20_errors_and_counts_the_rest():
    errors = [invalid(f"spec.tasks[{i}].replicas", "x", "must be an integer") for i in range(25)]
    message = str(PolicyError.from_errors("Job ns/j", errors))
    assert message.endswith('spec.tasks[19].replicas: Invalid value: "x": must be an integer, and 5 more]')
    assert message.count("Invalid value") == 20
    assert str(PolicyError.from_errors("Job ns/j", errors[:20])).endswith("must be an integer]")


def test_a_deployment_with_several_problems_reports_all_of_them():
    d = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ml", "labels": 3},
         "spec": {"replicas": "two", "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}},
                               "spec": {"topologySpreadConstraints": {}, "affinity": []}}}}
    with pytest.raises(PolicyError) as e:
        mutate(d, load_config(None))
    assert [x.field for x in e.value.errors] == ["metadata.labels", "spec.replicas",
                                                 "spec.template.spec.topologySpreadConstraints",
                                                 "spec.template.spec.affinity"]
    assert str(e.value) == ('Deployment ml/web: [metadata.labels: Invalid value: 3: must be a map, spec.replicas: '
                            'Invalid value: "two": must be an integer, spec.template.spec.topologySpreadConstraints: '
                            'Invalid value: {}: must be a list, spec.template.spec.affinity: Invalid value: []: '
                            'must be an object]')
    assert (e.value.field, e.value.message) == ("metadata.labels", "Invalid value: 3: must be a map")


def test_a_volcano_job_with_several_problems_reports_all_of_them():
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"tasks": [{"name": 1, "replicas": "4"}, {"name": "b", "policies": [{"exitCode": "x"}]}]}}
    with pytest.raises(PolicyError) as e:
        mutate(job, load_config(None))
    assert [str(x) for x in e.value.errors] == [
        'spec.tasks[0].replicas: Invalid value: "4": must be an integer >= 0',
        "spec.tasks[0].name: Invalid value: 1: must be a string",
        'spec.tasks[1].policies[0].exitCode: Invalid value: "x": must be an integer']


def test_a_kubeflow_job_with_several_problems_reports_all_of_them():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "t"},
           "spec": {"tfReplicaSpecs": {"PS": {"replicas": -1, "template": {}}, "Worker": {"replicas": 2}},
                    "runPolicy": {"schedulingPolicy": {"minAvailable": 0}}}}
    with pytest.raises(PolicyError) as e:
        mutate(job, load_config(None))
    assert [x.field for x in e.value.errors] == ["spec.tfReplicaSpecs.PS.replicas", "spec.tfReplicaSpecs.Worker.template",
                                                 "spec.runPolicy.schedulingPolicy.minAvailable"]


def test_config_reports_every_unsupported_gang_combination():
    from policylib import ConfigError
    with pytest.raises(ConfigError) as e:
        load_config({"gang": {"method": "labels", "scheduler": "scheduler-plugins", "groupByRole": True}})
    assert [x.field for x in e.value.errors] == ["gang.method and gang.scheduler", "gang.groupByRole and gang.scheduler"]
    assert "gang.groupByRole and gang.scheduler: gang.groupByRole true is not supported" in str(e.value)

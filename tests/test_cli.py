"""``policylib preview`` through the installed console script."""
import json
import subprocess
import sys
from pathlib import Path

import jsonpatch
import pytest
import yaml

from policylib import ClusterFacts, load_config, mutate
from tests.helpers import deployment, hpa

POLICYLIB = str(Path(sys.executable).parent / "policylib")


def run(*args, stdin=None):
    return subprocess.run([POLICYLIB, *args], input=stdin, capture_output=True, text=True, timeout=60)


def write(path: Path, *objs) -> str:
    path.write_text("---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objs))
    return str(path)


@pytest.fixture
def enforce(tmp_path):
    p = tmp_path / "values.yaml"
    p.write_text("lrs-operator:\n  operator:\n    config:\n      hostTopologySpread:\n"
                 "        whenUnsatisfiable: DoNotSchedule\n        minDomains: 3\n        hardMinReplicas: 3\n")
    return str(p)


def test_console_script_is_installed():
    assert Path(POLICYLIB).exists(), "make test installs the package with its console script"


def test_preview_yaml_prints_mutated_objects_in_order_and_not_context(tmp_path, enforce):
    f = write(tmp_path / "in.yaml", deployment("a", replicas=7), hpa("b", 12), deployment("b", replicas=2),
              {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}})
    out = run("preview", "--config", enforce, "-f", f)
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert [d["metadata"]["name"] for d in docs] == ["a", "b", "c"]
    hosts = [d["spec"]["template"]["spec"]["topologySpreadConstraints"][1] for d in docs[:2]]
    assert [(h["whenUnsatisfiable"], h["maxSkew"]) for h in hosts] == [("DoNotSchedule", 3), ("DoNotSchedule", 4)]
    config = load_config(enforce)
    facts = ClusterFacts.from_objects([hpa("b", 12)])
    assert docs[0] == mutate(deployment("a", replicas=7), config).object
    assert docs[1] == mutate(deployment("b", replicas=2), config, facts=facts).object


def test_preview_patch_is_one_compact_json_line_per_object(tmp_path):
    d = deployment(replicas=4)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    out = run("preview", "-f", write(tmp_path / "in.yaml", d, cm), "-o", "patch")
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and lines[1] == "[]"
    assert json.loads(lines[0]) == mutate(d).patch
    assert jsonpatch.apply_patch(d, json.loads(lines[0])) == mutate(d).object


def test_preview_diff_shows_changes_and_reasons(tmp_path, enforce):
    out = run("preview", "--config", enforce, "-f", write(tmp_path / "d.yaml", deployment(replicas=7)), "-o", "diff")
    assert out.returncode == 0
    assert "--- a/Deployment ml/web\n+++ b/Deployment ml/web\n" in out.stdout
    assert "+      - maxSkew: 3\n" in out.stdout
    assert "# host spread enforced: 7 effective replicas >= hardMinReplicas 3; maxSkew 3 = ceil(7/3)\n" in out.stdout


def test_exit_code_flag_reports_changes_like_kubectl_diff(tmp_path):
    f = write(tmp_path / "d.yaml", deployment())
    assert run("preview", "-f", f, "--exit-code", "-o", "patch").returncode == 1
    done = write(tmp_path / "done.yaml", mutate(deployment()).object)
    assert run("preview", "-f", done, "--exit-code").returncode == 0
    assert run("preview", "-f", f).returncode == 0


def test_old_previews_an_update(tmp_path, enforce):
    old = mutate(deployment(replicas=3), load_config(enforce)).object
    new = dict(old, spec=dict(old["spec"], replicas=9))
    unchanged = dict(old)
    of = write(tmp_path / "old.yaml", old)
    out = run("preview", "--config", enforce, "-f", write(tmp_path / "new.yaml", new), "--old", of, "-o", "patch")
    ops = json.loads(out.stdout)
    assert {"op": "replace", "path": "/metadata/annotations/policylib.io~1spread-effective-replicas",
            "value": "9"} in ops
    out = run("preview", "--config", enforce, "-f", write(tmp_path / "same.yaml", unchanged), "--old", of,
              "-o", "patch")
    assert out.stdout == "[]\n"


def test_stdin_json_and_kind_list(tmp_path):
    lst = {"apiVersion": "v1", "kind": "List", "items": [deployment("a"), deployment("b")]}
    out = run("preview", "-f", "-", "-o", "patch", stdin=json.dumps(lst))
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2


def test_multiple_files_keep_input_order(tmp_path):
    out = run("preview", "-f", write(tmp_path / "1.yaml", deployment("z")),
              "-f", write(tmp_path / "2.yaml", deployment("a")))
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out.stdout)] == ["z", "a"]


@pytest.mark.parametrize("setup,expected", [
    (lambda t: ["-f", write(t / "d.yaml", deployment(replicas="three"))],
     'd.yaml: Deployment ml/web: spec.replicas: Invalid value: "three": must be an integer'),
    (lambda t: ["-f", write(t / "d.yaml", {"apiVersion": "apps/v1", "kind": "Deployment",
                                           "metadata": {"name": "web", "namespace": "ml"},
                                           "spec": {"template": {"spec": {}}}})],
     "d.yaml: Deployment ml/web: spec.selector: Required value"),
    (lambda t: (t / "bad.yaml").write_text("kind: [\n") and ["-f", str(t / "bad.yaml")],
     "bad.yaml: invalid YAML: line 2 column 1"),
    (lambda t: ["-f", str(t / "missing.yaml")], "missing.yaml: cannot read: No such file or directory"),
    (lambda t: (t / "c.yaml").write_text("hostTopologySpread: {maxSkew: 0}\n") and
     ["--config", str(t / "c.yaml"), "-f", write(t / "d.yaml", deployment())],
     "c.yaml: hostTopologySpread.maxSkew: must be an integer >= 1, got 0"),
    (lambda t: (t / "s.yaml").write_text("- 1\n- 2\n") and ["-f", str(t / "s.yaml")],
     "s.yaml: document 1: expected a Kubernetes object (a mapping), got list"),
])
def test_user_errors_are_one_clear_line_without_traceback(tmp_path, setup, expected):
    out = run("preview", *setup(tmp_path))
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("policylib: error: ") and expected in lines[0]
    assert "Traceback" not in out.stderr


def test_warnings_go_to_stderr_with_the_object(tmp_path):
    d = deployment(pod_spec={"containers": [{"name": "a", "image": "x"}], "topologySpreadConstraints": [
        {"maxSkew": 0, "topologyKey": "example.com/rack", "whenUnsatisfiable": "ScheduleAnyway"}]})
    out = run("preview", "-f", write(tmp_path / "d.yaml", d), "-o", "patch")
    assert out.returncode == 0
    assert "policylib: warning: " in out.stderr and "Deployment ml/web" in out.stderr


def test_flow_style_yaml_is_yaml_not_broken_json(tmp_path):
    f = tmp_path / "flow.yaml"
    f.write_text("{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n")
    out = run("preview", "-f", str(f), "-o", "patch")
    assert out.returncode == 0 and out.stdout == "[]\n"


def test_plan_survives_unreadable_objects(tmp_path):
    bad = deployment("bad")
    bad["metadata"]["annotations"] = ["not", "a", "map"]
    f = write(tmp_path / "snap.yaml", bad, deployment("ok"))
    out = subprocess.run([POLICYLIB, "plan", "-f", f, "-o", "json"], capture_output=True, text=True)
    assert out.returncode == 1 and "Traceback" not in out.stderr   # an unplanned object fails the run (exit 1)
    [entry] = json.loads(out.stdout)
    assert entry["name"] == "bad" and entry["error"] is True

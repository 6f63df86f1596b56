"""The CLI's basics, through ``main()`` and the console script."""
import configparser
import io
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import jsonpatch
import pytest
import yaml

import policylib
from policylib import load_config, mutate
from policylib.cli import main
from policylib.hypernodes import discover_hypernodes, render_tree
from tests.helpers import REPO, deployment, hpa
from tests.test_gang import bare_seed_job
from tests.test_simulate import ENFORCE, TWO, deploy
from tests.test_volcano import DISCOVERY, seed_nodes

POLICYLIB = str(Path(sys.executable).parent / "policylib")
SOURCES = load_config({"volcano": {"networkTopologyDiscovery": DISCOVERY}}).volcano.networkTopologyDiscovery
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ml"}, "data": {"k": "v"}}
PODGROUP_CONFIG = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}


def cli(*args, stdin=""):
    out, err = io.StringIO(), io.StringIO()
    rc = main(list(args), stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


def write(path: Path, *objs) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objs))
    return str(path)


def write_config(tmp_path: Path, data: dict, name="c.yaml") -> str:
    return write(tmp_path / name, data)


def tf_job(scheduler_name: str | None = None):
    job = bare_seed_job()
    job["metadata"]["namespace"] = "ml"
    for spec in job["spec"]["tfReplicaSpecs"].values():
        if scheduler_name:
            spec["template"]["spec"]["schedulerName"] = scheduler_name
    return job


#: Pods that scheduler-plugins' scheduler gangs: no note that the templates name another (rule D3).
PLUGINS = "scheduler-plugins-scheduler"


# --- 5: an error in an HPA names the HPA's file --------------------------------------------------

HPA_WITHOUT_TARGET = ("HorizontalPodAutoscaler ml/web: spec.scaleTargetRef: Deployment ml/web is not in the input: its "
                      "minReplicas sets the replica count of no object here")
BAD_HPA = 'HorizontalPodAutoscaler ml/web: spec.minReplicas: Invalid value: "twelve": must be an integer'


@pytest.mark.parametrize("order", ["deployment-first", "hpa-first"])
def test_an_error_in_an_hpa_names_the_hpas_file(tmp_path, order):
    d = write(tmp_path / "deploy.yaml", deployment())
    h = write(tmp_path / "hpa.yaml", hpa("web", "twelve"))
    files = [d, h] if order == "deployment-first" else [h, d]
    rc, out, err = cli("preview", "-f", files[0], "-f", files[1])
    assert (rc, out, err) == (2, "", f"policylib: error: {h}: {BAD_HPA}\n")


def test_an_error_in_an_hpa_inside_a_directory_names_its_file(tmp_path):
    write(tmp_path / "app" / "a-deploy.yaml", deployment())
    h = write(tmp_path / "app" / "b-hpa.yaml", hpa("web", "twelve"))
    assert cli("preview", "-f", str(tmp_path / "app")) == (2, "", f"policylib: error: {h}: {BAD_HPA}\n")


def test_an_error_in_the_deployment_still_names_the_deployments_file(tmp_path):
    h = write(tmp_path / "hpa.yaml", hpa("web", 4))
    d = write(tmp_path / "deploy.yaml", deployment(replicas="three"))
    assert cli("preview", "-f", h, "-f", d) == \
        (2, "", f'policylib: error: {d}: Deployment ml/web: spec.replicas: Invalid value: "three": must be an integer\n')


def test_an_hpa_error_through_the_console_script(tmp_path):
    d = write(tmp_path / "deploy.yaml", deployment())
    h = write(tmp_path / "hpa.yaml", hpa("web", "twelve"))
    out = subprocess.run([POLICYLIB, "preview", "-f", d, "-f", h], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", f"policylib: error: {h}: {BAD_HPA}\n")


# --- 8: empty input is an error ------------------------------------------------------------------

EMPTY_TEXTS = ["", "\n", "---\n", "---\n---\n", "# only a comment\n", "apiVersion: v1\nkind: List\nitems: []\n",
               '{"apiVersion": "v1", "kind": "List", "items": []}']


@pytest.mark.parametrize("command", ["preview", "plan", "hypernodes"])
@pytest.mark.parametrize("text", EMPTY_TEXTS)
def test_an_empty_file_is_an_error(tmp_path, command, text):
    f = tmp_path / "empty.yaml"
    f.write_text(text)
    extra = ["--config", write_config(tmp_path, {"volcano": {"networkTopologyDiscovery": DISCOVERY}})] \
        if command == "hypernodes" else []
    assert cli(command, "-f", str(f), *extra) == (2, "", f"policylib: error: no Kubernetes objects in {f}\n")


@pytest.mark.parametrize("command", ["preview", "plan", "hypernodes"])
def test_empty_stdin_is_an_error(tmp_path, command):
    extra = ["--config", write_config(tmp_path, {"volcano": {"networkTopologyDiscovery": DISCOVERY}})] \
        if command == "hypernodes" else []
    assert cli(command, "-f", "-", *extra, stdin="") == (2, "", "policylib: error: no Kubernetes objects in <stdin>\n")


def test_empty_input_cannot_pass_an_exit_code_gate(tmp_path):
    f = tmp_path / "rendered.yaml"
    f.write_text("")
    out = subprocess.run([POLICYLIB, "preview", "-f", str(f), "--exit-code"], capture_output=True, text=True,
                         timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", f"policylib: error: no Kubernetes objects in {f}\n")
    out = subprocess.run([POLICYLIB, "preview", "-f", "-", "--exit-code"], input="", capture_output=True, text=True,
                         timeout=60)
    assert (out.returncode, out.stderr) == (2, "policylib: error: no Kubernetes objects in <stdin>\n")


def test_the_file_is_named_as_given_and_one_empty_file_among_several_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "ok.yaml", deployment())
    (tmp_path / "empty.yaml").write_text("")
    assert cli("preview", "-f", "ok.yaml", "-f", "./empty.yaml") == \
        (2, "", "policylib: error: no Kubernetes objects in ./empty.yaml\n")


def test_a_directory_without_objects_is_an_error(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("not a manifest")
    (tmp_path / "d" / "empty.yaml").write_text("")
    d = str(tmp_path / "d")
    assert cli("preview", "-f", d) == (2, "", f"policylib: error: no Kubernetes objects in {d}\n")
    assert cli("plan", "-f", d, "-R") == (2, "", f"policylib: error: no Kubernetes objects in {d}\n")


def test_only_context_objects_are_not_empty_input(tmp_path):
    """HPAs and Nodes are objects: preview prints nothing for them, and that is not an error (an HPA
    without its Deployment is a warning, rule D1)."""
    f = write(tmp_path / "h.yaml", hpa("web", 3))
    assert cli("preview", "-f", f) == (0, "", f"policylib: warning: {f}: {HPA_WITHOUT_TARGET}\n")


def test_simulate_and_check_keep_their_own_empty_input_behaviour(tmp_path):
    nodes = write(tmp_path / "nodes.yaml", *TWO)
    (tmp_path / "empty.yaml").write_text("")
    f = str(tmp_path / "empty.yaml")
    assert cli("simulate", "-f", f, "--nodes", nodes) == \
        (2, "", "policylib: error: no Deployment, StatefulSet, LeaderWorkerSet, Volcano Job, Kubeflow job, JobSet or "
                f"TrainJob in {f}\n")
    rc, out, err = cli("check", "-f", f, "--nodes", nodes)
    assert (rc, err) == (0, "")


def test_hypernodes_on_nodes_without_the_topology_labels_is_an_error(tmp_path):
    bare = [{"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": n["metadata"]["name"], "labels": {"kubernetes.io/hostname": n["metadata"]["name"]}}}
            for n in seed_nodes()]
    f = write(tmp_path / "nodes.yaml", {"apiVersion": "v1", "kind": "List", "items": bare})
    c = write_config(tmp_path, {"volcano": {"networkTopologyDiscovery": DISCOVERY}})
    assert cli("hypernodes", "-f", f, "--config", c) == (2, "", (
        f"policylib: error: {f}: no HyperNodes: no Node carries the topology labels of "
        "volcano.networkTopologyDiscovery; looked for testtopology: test-tier-3, test-tier-2, test-tier-1 "
        "(discovery starts at test-tier-1)\n"))


def test_hypernodes_on_input_without_nodes_keeps_its_message(tmp_path):
    c = write_config(tmp_path, {"volcano": {"networkTopologyDiscovery": DISCOVERY}})
    f = write(tmp_path / "d.yaml", deployment())
    assert cli("hypernodes", "-f", f, "--config", c) == (2, "", f"policylib: error: {f}: no v1 Node objects found\n")


# --- 11: --version -------------------------------------------------------------------------------

def setup_cfg_version() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return cfg["metadata"]["version"]


def test_version_is_the_one_in_setup_cfg_and_the_package_metadata():
    assert policylib.__version__ == version("policylib") == setup_cfg_version()


def test_version_flag_through_main_and_the_console_script():
    assert cli("--version") == (0, f"policylib {policylib.__version__}\n", "")
    out = subprocess.run([POLICYLIB, "--version"], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (0, f"policylib {setup_cfg_version()}\n", "")
    out = subprocess.run([sys.executable, "-m", "policylib.cli", "--version"], capture_output=True, text=True,
                         timeout=60)
    assert (out.returncode, out.stdout) == (0, f"policylib {setup_cfg_version()}\n")


def test_version_without_installed_metadata_falls_back_to_setup_cfg(tmp_path):
    """A source tree run without being installed: importlib.metadata knows no policylib."""
    code = ("import importlib.metadata as m\n"
            "def missing(name):\n    raise m.PackageNotFoundError(name)\n"
            "m.version = missing\n"
            "import policylib\nprint(policylib.__version__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert (out.returncode, out.stdout) == (0, setup_cfg_version() + "\n"), out.stderr


# --- 12: -f DIR and -R ---------------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path):
    """app/ with manifests in every extension, a file that is not one, and a subdirectory."""
    app = tmp_path / "app"
    write(app / "b.yaml", deployment("b"))
    write(app / "a.yml", deployment("a"))
    (app / "c.json").write_text(json.dumps(deployment("c")))
    (app / "README.md").write_text("# not a manifest\n")
    (app / "values.yaml.bak").write_text("not: read\n")
    write(app / "sub" / "d.yaml", deployment("d"))
    write(app / "sub" / "deeper" / "e.yaml", deployment("e"))
    write(app / "aa" / "f.yaml", deployment("f"))
    return app


def names(stdout):
    return [d["metadata"]["name"] for d in yaml.safe_load_all(stdout)]


def test_directory_reads_its_manifests_sorted_and_not_subdirectories(tree):
    rc, out, err = cli("preview", "-f", str(tree))
    assert (rc, err) == (0, "")
    assert names(out) == ["a", "b", "c"]


def test_recursive_walks_subdirectories_in_name_order_like_kubectl(tree):
    for flag in ("-R", "--recursive"):
        rc, out, err = cli("preview", "-f", str(tree), flag)
        assert (rc, err) == (0, "")
        assert names(out) == ["a", "f", "b", "c", "d", "e"]  # a.yml, aa/, b.yaml, c.json, sub/d, sub/deeper/e


def test_directories_and_files_mix_in_the_order_given(tree, tmp_path):
    rc, out, _ = cli("preview", "-f", write(tmp_path / "z.yaml", deployment("z")), "-f", str(tree / "sub"), "-R")
    assert (rc, names(out)) == (0, ["z", "d", "e"])


def test_plan_reads_a_directory(tree):
    rc, out, err = cli("plan", "-f", str(tree), "-R", "-o", "json")
    assert (rc, err) == (0, "")
    assert json.loads(out) == []  # bare Deployments below hardMinReplicas: nothing to plan


def test_hypernodes_reads_a_directory(tmp_path):
    nodes = seed_nodes()
    for n in nodes[:4]:
        write(tmp_path / "nodes" / f"{n['metadata']['name']}.yaml", n)
    for n in nodes[4:]:
        write(tmp_path / "nodes" / "more" / f"{n['metadata']['name']}.yaml", n)
    c = write_config(tmp_path, {"volcano": {"networkTopologyDiscovery": DISCOVERY}})
    rc, out, err = cli("hypernodes", "-f", str(tmp_path / "nodes"), "-R", "--config", c, "-o", "tree")
    assert (rc, out, err) == (0, render_tree(discover_hypernodes(seed_nodes(), SOURCES)), "")
    rc, out, _ = cli("hypernodes", "-f", str(tmp_path / "nodes"), "--config", c)
    assert (rc, list(yaml.safe_load_all(out))) == (0, discover_hypernodes(nodes[:4], SOURCES))


def test_simulate_and_check_read_directories(tmp_path):
    write(tmp_path / "w" / "web.yaml", deploy(replicas=3, group="two"))
    write(tmp_path / "w" / "nodes" / "nodes.yaml", *TWO)
    c = write_config(tmp_path, ENFORCE)
    rc, out, err = cli("simulate", "-f", str(tmp_path / "w"), "-R", "--config", c, "-o", "json")
    assert rc == 3, err
    assert [(r["name"], r["pending"]) for r in json.loads(out)] == [("web", 1)]
    rc, out, err = cli("simulate", "-f", str(tmp_path / "w"), "--config", c)
    assert (rc, out) == (2, "") and err.startswith("policylib: error: no Nodes:")  # nodes/ needs -R
    rc, out, err = cli("simulate", "-f", str(tmp_path / "w" / "web.yaml"), "--nodes", str(tmp_path / "w" / "nodes"),
                       "--config", c, "-o", "json")
    assert rc == 3 and json.loads(out)[0]["pending"] == 1
    rc, out, err = cli("check", "-f", str(tmp_path / "w"), "-R", "--config", c, "-o", "json")
    assert rc == 3 and json.loads(out)[0]["key"] == "hostTopologySpread.minDomains"


def test_a_bad_manifest_in_a_directory_is_named_by_its_path(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "bad.yaml").write_text("kind: [\n")
    rc, out, err = cli("preview", "-f", str(tmp_path / "d"))
    assert (rc, out) == (2, "")
    assert err.startswith(f"policylib: error: {tmp_path / 'd' / 'bad.yaml'}: invalid YAML: line 2 column 1")


def test_every_command_with_f_documents_directories_and_recursive(capsys):
    for command in ("preview", "plan", "hypernodes", "simulate", "check"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "-R, --recursive" in text and "a directory: its *.yaml, *.yml and *.json files, sorted" in text


# --- 13: -o patch, -o patch-list and -o diff name objects and show what the policies create ------

def test_patch_list_is_one_json_document_naming_every_object(tmp_path):
    d = deployment(replicas=4)
    f = write(tmp_path / "in.yaml", d, CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bare"}})
    rc, out, err = cli("preview", "-f", f, "-o", "patch-list")
    assert (rc, err) == (0, "")
    assert json.loads(out) == [{"object": "Deployment ml/web", "patch": mutate(d).patch},
                               {"object": "ConfigMap ml/c", "patch": []},
                               {"object": "ConfigMap bare", "patch": []}]
    assert out == "[\n" + ",\n".join(json.dumps(e, separators=(",", ":")) for e in json.loads(out)) + "\n]\n"


def test_patch_list_includes_the_podgroup_a_policy_creates(tmp_path):
    job = tf_job(PLUGINS)
    result = mutate(job, load_config(PODGROUP_CONFIG))
    [pg] = result.extra_objects
    rc, out, err = cli("preview", "--config", write_config(tmp_path, PODGROUP_CONFIG), "-f",
                       write(tmp_path / "job.yaml", job), "-o", "patch-list")
    assert (rc, err) == (0, "")
    entries = json.loads(out)
    assert entries == [{"object": "TFJob ml/tf-smoke-gpu", "patch": result.patch},
                       {"object": "PodGroup ml/tf-smoke-gpu", "patch": [{"op": "add", "path": "", "value": pg}]}]
    assert jsonpatch.apply_patch(job, entries[0]["patch"]) == result.object
    assert jsonpatch.apply_patch({}, entries[1]["patch"]) == pg


def test_patch_list_of_context_only_input_is_an_empty_list(tmp_path):
    f = write(tmp_path / "h.yaml", hpa("web", 3))
    assert cli("preview", "-f", f, "-o", "patch-list") == (0, "[]\n", f"policylib: warning: {f}: {HPA_WITHOUT_TARGET}\n")


def test_patch_keeps_its_format_one_line_per_input_object(tmp_path):
    job = tf_job(PLUGINS)
    result = mutate(job, load_config(PODGROUP_CONFIG))
    rc, out, err = cli("preview", "--config", write_config(tmp_path, PODGROUP_CONFIG), "-f",
                       write(tmp_path / "job.yaml", job, CM), "-o", "patch")
    assert (rc, err) == (0, "")
    assert out == json.dumps(result.patch, separators=(",", ":")) + "\n[]\n"


def test_diff_names_each_object_and_adds_the_podgroup_as_a_new_document(tmp_path):
    job = tf_job(PLUGINS)
    result = mutate(job, load_config(PODGROUP_CONFIG))
    rc, out, err = cli("preview", "--config", write_config(tmp_path, PODGROUP_CONFIG), "-f",
                       write(tmp_path / "job.yaml", job, CM), "-o", "diff")
    assert (rc, err) == (0, "")
    assert out.startswith("--- a/TFJob ml/tf-smoke-gpu\n+++ b/TFJob ml/tf-smoke-gpu\n@@ ")
    pg_yaml = ("--- /dev/null\n+++ b/PodGroup ml/tf-smoke-gpu\n@@ -0,0 +1,8 @@\n"
               "+apiVersion: scheduling.x-k8s.io/v1alpha1\n+kind: PodGroup\n+metadata:\n+  name: tf-smoke-gpu\n"
               "+  namespace: ml\n+spec:\n+  scheduleTimeoutSeconds: 10\n+  minMember: 5\n")
    reasons = "".join(f"# {r}\n" for r in result.reasons)
    assert pg_yaml + reasons + "= ConfigMap ml/c: not handled\n# not handled: policylib has no policy for v1 " \
        "ConfigMap (it handles Deployments, StatefulSets, LeaderWorkerSets, Kubeflow TFJobs, PyTorchJobs and MPIJobs, " \
        "JobSets, TrainJobs, Volcano Jobs and gang Pods)\n" in out
    assert out.index("--- a/TFJob") < out.index("--- /dev/null") < out.index("= ConfigMap ml/c")


def test_yaml_output_still_appends_the_podgroup(tmp_path):
    job = tf_job()
    result = mutate(job, load_config(PODGROUP_CONFIG))
    rc, out, _ = cli("preview", "--config", write_config(tmp_path, PODGROUP_CONFIG), "-f",
                     write(tmp_path / "job.yaml", job))
    assert (rc, list(yaml.safe_load_all(out))) == (0, [result.object, *result.extra_objects])


# --- 14: hypernodes needs --config, and says so ---------------------------------------------------

def test_hypernodes_usage_says_config_is_required(capsys):
    with pytest.raises(SystemExit) as e:
        main(["hypernodes", "--help"])
    assert e.value.code == 0
    usage = capsys.readouterr().out.splitlines()[0]
    assert usage == "usage: policylib hypernodes [-h] -f NODES [-f NODES ...] [-R] --config FILE [-o {yaml,tree}]"


def test_hypernodes_without_config_is_one_clear_error(tmp_path):
    f = write(tmp_path / "nodes.yaml", *seed_nodes())
    assert cli("hypernodes", "-f", f) == (2, "", (
        "policylib: error: hypernodes needs --config FILE: without it there is no enabled 'label' source in "
        "volcano.networkTopologyDiscovery (Volcano's default_controller_conf list; docs/specification.md rule H1)\n"))


def test_exit_code_3_when_a_returned_volcano_job_would_still_be_denied(tmp_path):
    import io

    import yaml

    from policylib.cli import main
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"},
           "spec": {"tasks": [{"name": "t", "replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}],
                    "policies": [{"event": "PodFailed", "action": "Explode"}]}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    out, err = io.StringIO(), io.StringIO()
    assert main(["preview", "-f", str(path), "--exit-code"], stdout=out, stderr=err) == 3
    assert err.getvalue() == (f"policylib: warning: {path}: Job ml/j: would still be denied by Volcano's job admission "
                              '(v1.15.1): spec.policies[0].action: Unsupported value: "Explode": supported values: "AbortJob", '
                              '"RestartJob", "RestartTask", "RestartPod", "RestartPartition", "TerminateJob", '
                              '"CompleteJob", "ResumeJob"\n')
    assert main(["preview", "-f", str(path)], stdout=io.StringIO(), stderr=io.StringIO()) == 0


def test_a_render_of_only_empty_mappings_cannot_pass_the_gate(tmp_path):
    import io

    from policylib.cli import main
    err = io.StringIO()
    assert main(["preview", "-f", "-", "--exit-code"], stdin=io.StringIO("{}\n---\n{}\n"), stdout=io.StringIO(),
                stderr=err) == 2
    assert err.getvalue() == "policylib: error: no Kubernetes objects in <stdin>\n"

"""Where users already run checks (docs/integrations.md): shell completion generated from the parsers,
the kubectl plugin's flags, and the pre-commit hook run by pre-commit itself on a temporary git repository.
(``kubectl plugin list`` and ``kubectl policylib`` through the harness's kubectl: tests/e2e/test_kubectl_plugin.py.)"""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from policylib.cli import build_parser, completion_script, kubectl_argv, main, pre_commit_argv
from tests.helpers import REPO
from tests.test_distribution import fill_wheelhouse

BIN = Path(sys.executable).parent


# --- completion ---------------------------------------------------------------------------------------

def complete(script: Path, *words: str) -> list[str]:
    """What bash completes for the command line ``words`` (the last one being completed), with the script loaded."""
    line = " ".join(words)
    probe = (f"source {script}\nCOMP_WORDS=({line})\nCOMP_CWORD={len(words) - 1}\nCOMP_LINE='{line}'\n"
             f"COMP_POINT={len(line)}\n_shtab_policylib\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    out = subprocess.run(["bash", "--norc", "--noprofile", "-c", probe], capture_output=True, text=True, timeout=60,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr
    return [w for w in out.stdout.splitlines() if w]


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "policylib.bash"
    out = subprocess.run([str(BIN / "policylib"), "completion", "bash"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    path.write_text(out.stdout)
    return path


def test_the_bash_script_is_valid_and_completes_commands_options_and_choices(bash_script):
    syntax = subprocess.run(["bash", "-n", str(bash_script)], capture_output=True, text=True, timeout=60)
    assert (syntax.returncode, syntax.stderr) == (0, "")
    text = bash_script.read_text()
    assert "complete -o bashdefault -o default -F _shtab_policylib policylib kubectl-policylib" in text
    assert complete(bash_script, "policylib", "") == ["preview", "hypernodes", "plan", "simulate", "check",
                                                      "completion"]
    assert complete(bash_script, "policylib", "si") == ["simulate"]
    assert complete(bash_script, "policylib", "completion", "") == ["bash", "zsh"]
    assert complete(bash_script, "policylib", "plan", "-o", "") == ["table", "json"]
    assert {"--cluster", "--context", "--kubeconfig", "--namespace"} <= set(complete(bash_script, "policylib", "plan",
                                                                                      "--"))


def test_every_command_and_option_of_the_parser_is_in_the_scripts():
    """Generated from build_parser: a command or flag added there completes without another change."""
    usage = build_parser().format_help()
    bash, zsh = completion_script("bash"), completion_script("zsh")
    for command in ("preview", "hypernodes", "plan", "simulate", "check", "completion"):
        assert command in usage and command in bash and f"{command}:" in zsh
    assert zsh.startswith("#compdef policylib kubectl-policylib\n")
    for flag in ("--exit-code", "--old", "--node-group-label", "--kustomize", "--recursive"):
        assert flag in bash and flag in zsh


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (apt-get install zsh)")
def test_the_zsh_script_is_valid_zsh(tmp_path):
    script = tmp_path / "_policylib"
    script.write_text(completion_script("zsh"))
    out = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stderr) == (0, "")


# --- kubectl plugin -------------------------------------------------------------------------------------

def test_kubectls_global_flags_before_the_command_move_after_it():
    assert kubectl_argv(["--kubeconfig", "k", "--context=c", "-n", "ns", "plan", "--cluster"]) == \
        ["plan", "--kubeconfig", "k", "--context=c", "-n", "ns", "--cluster"]
    assert kubectl_argv(["--namespace=ns", "check", "--cluster"]) == ["check", "--namespace=ns", "--cluster"]
    # after the command they stay, and what is not one of kubectl's flags is left to the parser
    assert kubectl_argv(["plan", "--cluster", "-n", "ns"]) == ["plan", "--cluster", "-n", "ns"]
    assert kubectl_argv(["--version"]) == ["--version"]
    assert kubectl_argv(["-n"]) == ["-n"]


def test_the_plugins_flags_reach_the_cluster_commands(tmp_path):
    """Through main: a flag moved from before the command is parsed by the command (here, a kubeconfig that
    does not exist is named in the error)."""
    missing = tmp_path / "nope"
    out, err = io.StringIO(), io.StringIO()
    code = main(kubectl_argv(["--kubeconfig", str(missing), "--context", "c", "plan", "--cluster"]), io.StringIO(), out, err)
    assert (code, out.getvalue()) == (2, "")
    assert err.getvalue() == (f"policylib: error: cannot read the cluster: no kubeconfig found at {missing}, "
                              "and not running in a pod\n")


# --- pre-commit hook ------------------------------------------------------------------------------------

HOOKS = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())


def test_the_hook_entry_makes_a_preview_gate_of_the_staged_files():
    assert pre_commit_argv(["--config", "p.yaml", "a.yaml", "b.yaml"]) == \
        ["preview", "--exit-code", "-o", "diff", "--config", "p.yaml", "-f", "a.yaml", "-f", "b.yaml"]
    assert pre_commit_argv(["a.yaml"]) == ["preview", "--exit-code", "-o", "diff", "-f", "a.yaml"]


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com")
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.timeout(300)
def test_pre_commit_runs_the_hook_and_a_manifest_the_webhook_would_change_fails_the_commit(tmp_path):
    """pre-commit itself, on a temporary git repository: the hook as .pre-commit-hooks.yaml defines it (its
    entry, file pattern and serial run), the installed console script as its command (``language: system``
    instead of ``python``, which would install this repository again from the network)."""
    (hook,) = [h for h in HOOKS if h["id"] == "policylib-preview"]
    assert hook["language"] == "python" and hook["entry"] == "policylib-pre-commit"
    home = tmp_path / "pre-commit-home"
    env = dict(os.environ, PRE_COMMIT_HOME=str(home), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    manifest = subprocess.run([sys.executable, "-m", "pre_commit", "validate-manifest",
                               str(REPO / ".pre-commit-hooks.yaml")], capture_output=True, text=True, timeout=120, env=env)
    assert manifest.returncode == 0, manifest.stdout + manifest.stderr
    repo = tmp_path / "repo"
    (repo / "deploy").mkdir(parents=True)
    assert git(repo, "init", "-q").returncode == 0
    shutil.copy(REPO / "docs" / "examples" / "enforce.yaml", repo / "policy.yaml")
    shutil.copy(REPO / "docs" / "examples" / "web.yaml", repo / "deploy" / "web.yaml")
    (repo / "notes.yaml").write_text("not: a manifest\n")    # outside `files`: not given to the hook
    local = {**{k: v for k, v in hook.items() if k != "language"}, "language": "system",
             "args": ["--config", "policy.yaml"], "files": r"^deploy/.*\.ya?ml$"}
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump({"repos": [{"repo": "local", "hooks": [local]}]}))
    config = subprocess.run([sys.executable, "-m", "pre_commit", "validate-config", ".pre-commit-config.yaml"],
                            cwd=repo, capture_output=True, text=True, timeout=120, env=env)
    assert config.returncode == 0, config.stdout + config.stderr
    installed = subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=repo, capture_output=True,
                               text=True, timeout=120, env=env)
    assert installed.returncode == 0, installed.stderr
    git(repo, "add", ".")
    commit = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "web"],
                            cwd=repo, capture_output=True, text=True, timeout=240, env=env)
    said = commit.stdout + commit.stderr     # git passes a hook's output on to its stderr
    assert commit.returncode == 1, said
    assert "policylib preview" in said and "Failed" in said and "exit code: 1" in said
    assert "+        topologyKey: kubernetes.io/hostname" in said
    assert "# effective replicas 12 (HorizontalPodAutoscaler web minReplicas 12)" in said
    assert git(repo, "rev-parse", "HEAD").returncode != 0      # nothing was committed

    # what the webhook would admit passes
    admitted = subprocess.run([str(BIN / "policylib"), "preview", "--config", "policy.yaml", "-f", "deploy/web.yaml"],
                              cwd=repo, capture_output=True, text=True, timeout=120)
    hpa = (REPO / "docs" / "examples" / "web.yaml").read_text().split("\n---\n")[0]
    (repo / "deploy" / "web.yaml").write_text(hpa + "\n---\n" + admitted.stdout)
    git(repo, "add", ".")
    commit = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "web"],
                            cwd=repo, capture_output=True, text=True, timeout=240, env=env)
    said = commit.stdout + commit.stderr
    assert commit.returncode == 0, said
    assert "policylib preview" in said and "Passed" in said


def test_the_documented_pre_commit_config_is_valid_and_uses_the_hook(tmp_path):
    import re
    text = (REPO / "docs" / "integrations.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "policylib-preview" in b]
    config = tmp_path / ".pre-commit-config.yaml"
    config.write_text(block)
    out = subprocess.run([sys.executable, "-m", "pre_commit", "validate-config", str(config)], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "home")))
    assert out.returncode == 0, out.stdout + out.stderr
    (entry,) = yaml.safe_load(block)["repos"]
    assert entry["hooks"][0]["id"] in {h["id"] for h in HOOKS}
    assert entry["hooks"][0]["args"][0] == "--config"


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    """tests/test_distribution.py's wheelhouse (.venv/wheelhouse), filled if it is not."""
    return fill_wheelhouse()


@pytest.mark.timeout(600)
def test_pre_commit_try_repo_installs_this_repository_and_runs_the_hook(tmp_path, wheelhouse):
    """The hook exactly as a user's pre-commit runs it (``language: python``): pre-commit clones this
    repository, installs it into a virtualenv of its own (from the wheelhouse of tests/test_distribution.py,
    offline) and runs the entry on the files given."""
    repo = tmp_path / "repo"
    (repo / "deploy").mkdir(parents=True)
    assert git(repo, "init", "-q").returncode == 0
    shutil.copy(REPO / "docs" / "examples" / "web.yaml", repo / "deploy" / "web.yaml")
    git(repo, "add", ".")
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "home"), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse),
               PIP_CONSTRAINT=str(REPO / "constraints.txt"))
    out = subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(REPO), "policylib-preview", "--files",
                          "deploy/web.yaml"], cwd=repo, capture_output=True, text=True, timeout=540, env=env)
    said = out.stdout + out.stderr
    assert out.returncode == 1, said
    assert "policylib preview" in said and "Failed" in said and "exit code: 1" in said
    assert "--- a/Deployment ml/web" in said and "# effective replicas 12 (HorizontalPodAutoscaler web minReplicas 12)" in said

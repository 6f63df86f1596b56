"""What the install docs say about the webhooks is what manifests/ and the chart install: every statement of a
failure policy names the webhooks that fail closed, the webhook table matches the configuration, the chart's
defaults are the manifests' policies, and the certificate steps reach every webhook by name."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, documented_install_steps

PAGES = sorted([*(REPO / "docs").rglob("*.md"), REPO / "README.md"])
#: A statement that the webhooks fail open, or that nothing is ever blocked.
CLAIM = re.compile(r"`failurePolicy: Ignore`|never blocks?\b|never blocking|is never blocked|\bfails? open\b", re.I)
ITEM = re.compile(r"^\s*(?:[-*] |\d+\. |\|)")


def configuration() -> dict:
    return yaml.safe_load((REPO / "manifests" / "base" / "mutatingwebhookconfiguration.yaml").read_text())


def policies() -> dict[str, str]:
    return {w["name"]: w["failurePolicy"] for w in configuration()["webhooks"]}


def fail_closed_names(name: str) -> tuple[str, ...]:
    """How the docs may name a webhook: ``gang-pods.policylib.io``, ``gang-pods``, "gang pod"."""
    short = name.split(".")[0]
    return name, short, short.replace("-", " ").rstrip("s")


def units(text: str) -> list[str]:
    """Paragraphs, with each list item and table row on its own (its continuation lines with it); code blocks
    left out."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    out: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        current: list[str] = []
        for line in paragraph.splitlines():
            if ITEM.match(line) and current:
                out.append("\n".join(current))
                current = []
            current.append(line)
        if current:
            out.append("\n".join(current))
    return out


def test_the_manifests_have_a_webhook_that_fails_closed_and_the_chart_defaults_agree():
    found = policies()
    assert found == {"deployments.policylib.io": "Ignore", "volcano-jobs.policylib.io": "Ignore",
                     "kubeflow-jobs.policylib.io": "Ignore", "jobsets.policylib.io": "Ignore",
                     "gang-pods.policylib.io": "Fail", "trainjobs.policylib.io": "Ignore",
                     "statefulsets.policylib.io": "Ignore", "leaderworkersets.policylib.io": "Ignore"}
    webhook = yaml.safe_load((REPO / "charts" / "policylib" / "values.yaml").read_text())["webhook"]
    assert webhook["failurePolicy"] == found["deployments.policylib.io"]
    assert webhook["gangPodsFailurePolicy"] == found["gang-pods.policylib.io"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_fail_open_statement_names_the_webhooks_that_fail_closed(page: Path):
    closed = [name for name, policy in policies().items() if policy != "Ignore"]
    wrong = []
    for unit in units(page.read_text()):
        if CLAIM.search(unit):
            missing = [n for n in closed if not any(alias in unit for alias in fail_closed_names(n))]
            if missing:
                wrong.append(f"{' '.join(unit.split())[:160]}... (does not name {', '.join(missing)})")
    assert wrong == [], f"{page.relative_to(REPO)} says the webhooks fail open without the exceptions: {wrong}"


def test_the_checker_finds_the_old_statements():
    closed_named = "Each has `failurePolicy: Ignore` (but `gang-pods.policylib.io`: `Fail`)."
    assert [bool(CLAIM.search(u)) for u in units("- `failurePolicy: Ignore` means an unavailable webhook never "
                                                    "blocks the cluster.\n- every webhook fails open\n\n| a | b |")] \
        == [True, True, False]
    assert any(a in closed_named for a in fail_closed_names("gang-pods.policylib.io"))


def test_the_webhook_table_is_the_configuration():
    text = (REPO / "docs" / "webhook.md").read_text()
    rows = re.findall(r"^\| `([\w.-]+\.policylib\.io)` \| (.*?) \| ([A-Z, ]+) \| (\w+) \|$", text, re.M)
    hooks = configuration()["webhooks"]
    assert [(name, policy) for name, _, _, policy in rows] == [(w["name"], w["failurePolicy"]) for w in hooks]
    for (name, resources, operations, _), hook in zip(rows, hooks, strict=True):
        rules = hook["rules"]
        assert operations.split(", ") == rules[0]["operations"], name
        for rule in rules:
            for version in rule["apiVersions"]:
                group = rule["apiGroups"][0]
                assert f"`{group + '/' if group else ''}{version}`" in resources, (name, version)
            for resource in rule["resources"]:
                assert resource in resources, (name, resource)


def test_the_certificate_steps_patch_every_webhook_by_name():
    steps = documented_install_steps()
    assert "--patch-configuration policylib-webhook" in steps
    assert configuration()["metadata"]["name"] == "policylib-webhook"
    assert not re.search(r"/webhooks/(\d|\$)", steps), "a step addresses the webhooks by index"
    assert steps.index("kubectl apply -k manifests/") < steps.index("--patch-configuration")

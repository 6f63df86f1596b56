"""The documentation cannot drift from the code.

- The site (mkdocs.yml, docs/) builds with ``mkdocs build --strict``: a broken link, a broken
  anchor or a nav entry without its page fails.
- The reference pages under docs/reference/ are what tools/gen_reference.py makes from the code
  now (CLI parsers, metrics, the webhook's flags): a flag or metric added without ``make docs``
  fails here.
- Every ``$ policylib ...`` example shown in a fenced block of README.md or any page under docs/
  runs against the files it names, and its shown output is compared (see ``matches``). Every
  ``>>>`` example in those pages runs as a doctest.
- The README stays a front page: two set-up commands, a few screens, links that resolve.
"""
from __future__ import annotations

import doctest
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *DOCS.rglob("*.md")])


def _load_tool(name: str):
    """A module of tools/ (a script directory, not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


GEN = _load_tool("gen_reference")


# --- the site --------------------------------------------------------------------------------------

@pytest.mark.timeout(600)
def test_site_builds_in_strict_mode(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=540, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()


def test_nav_hook_refuses_missing_pages_and_lists_unlisted_ones(tmp_path):
    from mkdocs.exceptions import PluginError

    hooks = _load_tool("mkdocs_hooks")
    (tmp_path / "a.md").write_text("# a\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.md").write_text("# c\n")
    assert hooks.nav_for([{"A": "a.md"}], tmp_path) == [{"A": "a.md"}, {"More": ["sub/c.md"]}]
    nav = [{"A": "a.md"}, {"Group": [{"B": "b.md"}]}, "missing.md", {"Site": "https://example.com/"}]
    with pytest.raises(PluginError) as refused:
        hooks.nav_for(nav, tmp_path)
    assert "2 page(s) that do not exist" in str(refused.value) and "b.md, missing.md" in str(refused.value)


def test_a_nav_entry_without_its_page_fails_the_build(tmp_path):
    """The strict build with this project's hook: a nav entry whose page is missing is an error, not dropped."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# home\n")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump({
        "site_name": "t", "docs_dir": "docs", "strict": True, "hooks": [str(ROOT / "tools" / "mkdocs_hooks.py")],
        "nav": [{"Home": "index.md"}, {"Reference": [{"Helm values": "reference/helm-values.md"}]}]}))
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert out.returncode != 0, out.stdout + out.stderr
    assert "nav lists 1 page(s) that do not exist" in out.stderr and "reference/helm-values.md" in out.stderr, out.stderr


def test_every_nav_entry_of_the_site_exists():
    hooks = _load_tool("mkdocs_hooks")
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    assert hooks.missing_pages(nav, ROOT / "docs") == []
    assert "reference/helm-values.md" in hooks.listed_pages(nav)


# --- generated reference pages ---------------------------------------------------------------------

def test_generated_reference_pages_are_fresh():
    assert GEN.stale() == [], "run `make docs` (tools/gen_reference.py) and commit docs/reference/"


COMPAT = _load_tool("gen_compatibility")


def test_compatibility_rows_come_from_the_tests_proves_markers(tmp_path):
    """docs/compatibility.md's rows are the end-to-end tests' declarations (tools/gen_compatibility.py): each
    names the test that carries it, with the minors it runs on; a declaration without every column is refused."""
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.proves(scheduler='kube-scheduler', settings='`method: workload`', operator='training-operator, none',"
        " jobs='TFJob', outcome='all bind', kubernetes=('1.36', '1.37'))\n"
        "@pytest.mark.proves(scheduler='s', settings='x', operator='o', jobs='j', outcome='o2')\n"
        "def test_a():\n    pass\n")
    found = COMPAT.rows(tmp_path)
    assert [(r.scheduler, r.kubernetes, r.test) for r in found] == [
        ("kube-scheduler", ("1.36", "1.37"), "tests/e2e/test_x.py::test_a"),
        ("s", (COMPAT.default_minor(),), "tests/e2e/test_x.py::test_a")]
    (tmp_path / "test_w.py").write_text(
        "import pytest\n\nMINORS = ('1.36',)\npytestmark = pytest.mark.minors(*MINORS)\n\n\n"
        "@pytest.mark.proves(scheduler='m', settings='x', operator='o', jobs='j', outcome='o')\n"
        "def test_m():\n    pass\n\n\n"
        "@pytest.mark.proves(scheduler='all', settings='x', operator='o', jobs='j', outcome='o')\n"
        "@pytest.mark.minors()\n"
        "def test_all():\n    pass\n")
    assert [(r.scheduler, r.kubernetes) for r in COMPAT.rows(tmp_path)][:2] == [
        ("m", ("1.36",)), ("all", COMPAT.harness_minors())]     # the tests' own minors marks decide
    (tmp_path / "test_w.py").unlink()
    (tmp_path / "test_y.py").write_text("import pytest\n\n\n@pytest.mark.proves(scheduler='s', jobs='j')\n"
                                        "def test_b():\n    pass\n")
    with pytest.raises(ValueError) as e:
        COMPAT.rows(tmp_path)
    assert str(e.value) == ("test_y.py::test_b: pytest.mark.proves needs keywords scheduler, settings, operator, jobs, "
                            "outcome (missing: settings, operator, outcome)")
    page = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    assert all(f"`{r.test}`" in page for r in COMPAT.rows())


def _options(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_text))


def test_cli_reference_names_every_command_and_flag_the_parser_accepts():
    from policylib import cli

    page = (DOCS / "reference" / "cli.md").read_text()
    top = GEN.record(cli.build_parser)
    assert set(top.subcommands) == set(cli.EXIT_STATUS), "every command needs its exit statuses in EXIT_STATUS"
    for name, (cmd, _) in top.subcommands.items():
        section = page.split(f"## `policylib {name}`", 1)[1].split("\n## ", 1)[0]
        # Cross-check the recorder against argparse's own help text, so a flag it missed is caught.
        for option in _options(cmd.parser.format_help().split("options:", 1)[1]):
            assert f"`{option}`" in section, (name, option)
        for code in cli.EXIT_STATUS[name]:
            assert f"\n| {code} |" in section, (name, code)


def _settings(properties: dict, prefix: str = ""):
    for name, prop in properties.items():
        yield f"{prefix}{name}"
        if isinstance(prop.get("properties"), dict):
            yield from _settings(prop["properties"], f"{prefix}{name}.")


def test_config_reference_names_every_setting_of_the_schema():
    from policylib.config import config_schema

    page = (DOCS / "reference" / "config.md").read_text()
    settings = list(_settings(config_schema()["properties"]))
    assert len(settings) > 20
    for setting in settings:
        if "properties" not in config_schema()["properties"].get(setting, {}):
            assert f"| `{setting}` |" in page, setting


def test_metrics_reference_names_every_metric_the_code_exposes():
    from webhook.admission.metrics import Metrics
    from webhook.controller import ControllerMetrics

    page = (DOCS / "reference" / "metrics.md").read_text()
    for owner in (Metrics(), ControllerMetrics()):
        for family in owner.registry.collect():
            assert f"`{family.name}" in page, family.name
    assert "`policylib_webhook_reviews_total` | counter | `kind`, `operation`, `outcome`" in page


def test_the_metrics_reference_has_every_metric_constructed_in_the_code():
    """A metric created in a class or module the generator does not read would be missing: count them."""
    import ast

    kinds = {"Counter", "Gauge", "Histogram", "Summary", "Info", "Enum"}
    made = 0
    for path in [*(ROOT / "webhook").rglob("*.py"), *(ROOT / "policylib").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in kinds:
                made += 1
    rows = [line for line in (DOCS / "reference" / "metrics.md").read_text().splitlines()
            if line.startswith(("| `policylib_", "| `workqueue_"))]
    assert made == len(rows), f"{made} metrics constructed in the code, {len(rows)} in docs/reference/metrics.md: " \
                              "add the new metrics' owner to tools/gen_reference.py"


def test_every_metric_the_docs_name_exists():
    page = (DOCS / "reference" / "metrics.md").read_text()
    names = {m for p in PAGES for m in re.findall(r"\bpolicylib_(?:webhook|controller)_[a-z_]+[a-z]", p.read_text())}
    series = set(re.findall(r"`(policylib_[a-z_]+)`", page))
    families = {re.sub(r"_(bucket|sum|count)$", "", s) for s in series}
    assert names
    for name in names:
        assert name in series | families, f"{name} is named in the docs but no such metric exists"


def test_the_harness_reference_has_every_flag_the_harness_defines():
    source = (ROOT / "e2e" / "cmd" / "testcluster" / "main.go").read_text(encoding="utf-8")
    defined = re.findall(r"\bfs\.\w*Var\(", source)
    flags = GEN.go_flags(source)
    assert len(flags) == len(defined) >= 8, "a flag definition tools/gen_reference.py cannot read"
    page = (DOCS / "reference" / "testcluster.md").read_text()
    assert "| `--crd` | value (repeatable) |  | CustomResourceDefinition file" in page
    # a default named by a constant (minors.go's defaultMinor) is the constant's value
    assert "| `--kubernetes` | string | `1.37` | " in page
    for name, *_ in flags:
        assert f"| `--{name}` |" in page


def test_metric_label_names_are_read_through_the_public_api():
    from prometheus_client import CollectorRegistry, Counter, Gauge

    registry = CollectorRegistry()
    assert GEN.metric_label_names(Counter("x", "x", ["a", "b"], registry=registry)) == ["a", "b"]
    assert GEN.metric_label_names(Gauge("y", "y", registry=registry)) == []


# --- examples that run -----------------------------------------------------------------------------

FENCE = re.compile(r"^(```+|~~~+)[^\n]*\n(.*?)^\1\s*$", re.S | re.M)
FILE_FLAGS = {"-f", "--filename", "--config", "--nodes", "--old"}


@dataclass
class Example:
    page: Path
    line: int
    command: str
    shown: list[str]
    exit_status: int | None

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def examples(page: Path) -> list[Example]:
    """Each ``$ policylib ...`` in a fenced block that shows its output, with the lines shown after it
    up to the next ``$``.

    A ``$ echo $?`` right after a command states its exit status. Other ``$`` commands in the block
    (kubectl, make) and their output are not run; ``policylib`` commands that need a live cluster
    (``--cluster``) or show no output are not examples. Blocks without a ``$ policylib`` line (usage
    synopses, YAML, shell without prompts) are not examples either.
    """
    text = page.read_text(encoding="utf-8")
    found: list[Example] = []
    for m in FENCE.finditer(text):
        lines = m.group(2).splitlines()
        if not any(line.startswith("$ policylib ") for line in lines):
            continue
        first_line = text.count("\n", 0, m.start(2)) + 1
        last: Example | None = None
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                i += 1
                continue
            start = i
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            i += 1
            shown = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i])
                i += 1
            if command.strip() == "echo $?":
                if last is not None and shown:
                    last.exit_status = int(shown[0])
                continue
            last = None
            if not command.startswith("policylib ") or "--cluster" in shlex.split(command):
                continue
            example = Example(page, first_line + start, command, shown, None)
            if any(line.strip() for line in shown) or (i < len(lines) and lines[i].strip() == "$ echo $?"):
                found.append(example)
                last = example
    return found


ALL_EXAMPLES = [e for page in PAGES for e in examples(page)]


def matches(shown: list[str], actual: list[str]) -> bool:
    """Shown output against the real output, line by line (trailing spaces ignored).

    A line that is only ``...`` stands for any number of lines (the output is abbreviated there);
    a line ending in ``...`` matches any line that starts with the text before it.
    """
    shown = [s.rstrip() for s in shown]
    actual = [a.rstrip() for a in actual]

    def at(i: int, j: int) -> bool:
        if i == len(shown):
            return j == len(actual)
        if shown[i] == "...":
            return any(at(i + 1, k) for k in range(j, len(actual) + 1))
        if j == len(actual):
            return False
        prefix = shown[i][:-3].rstrip() if shown[i].endswith("...") else None
        ok = actual[j].startswith(prefix) if prefix is not None else shown[i] == actual[j]
        return ok and at(i + 1, j + 1)

    return at(0, 0)


def test_matches_abbreviations():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "b"], ["a", "b"])
    assert matches(["long line ..."], ["long line with more"])
    assert not matches(["a"], ["a", "b"])
    assert not matches(["a", "x"], ["a", "b"])


def test_examples_are_found_as_documented(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("""
```console
$ kubectl get nodes
NAME
$ policylib preview -f docs/examples/web.yaml \\
    -o patch
[...
$ echo $?
0
$ policylib plan --cluster
nothing
$ policylib simulate -f docs/examples/web.yaml
```

```sh
policylib preview -f deploy.yaml
```
""")
    (found,) = examples(page)
    assert (found.command, found.shown, found.exit_status) == (
        "policylib preview -f docs/examples/web.yaml  -o patch", ["[..."], 0)


def test_examples_are_found_on_every_page_that_shows_one():
    pages = {e.page.relative_to(ROOT).as_posix() for e in ALL_EXAMPLES}
    assert {"README.md", "docs/cli.md"} <= pages, pages
    assert len(ALL_EXAMPLES) >= 10


def _run(example: Example) -> subprocess.CompletedProcess:
    argv = shlex.split(example.command)
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag in FILE_FLAGS and value != "-":
            assert (ROOT / value).exists(), f"{example}: {value} does not exist"
    policylib = Path(sys.executable).parent / "policylib"
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="100")
    return subprocess.run([str(policylib), *argv[1:]], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120, env=env)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("example", ALL_EXAMPLES, ids=str)
def test_documented_example_prints_what_the_docs_show(example):
    out = _run(example)
    assert matches(example.shown, out.stdout.splitlines()), (
        f"{example}: `{example.command}` printed (exit {out.returncode}):\n{out.stdout}")
    if example.exit_status is not None:
        assert out.returncode == example.exit_status, f"{example}: exit {out.returncode}\n{out.stdout}"
    else:
        assert out.returncode == 0, f"{example}: exit {out.returncode}; show it with `$ echo $?`\n{out.stdout}"


DOCTEST_PAGES = [p for p in PAGES if ">>> " in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("page", DOCTEST_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_library_examples_run(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = doctest.testfile(str(page), module_relative=False, verbose=False, report=True,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0, f"{page}: {result.failed} of {result.attempted} examples failed (see the output above)"


# --- the README as a front page --------------------------------------------------------------------

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_first_screen_has_exactly_the_two_setup_commands():
    first_screen = "\n".join(README.splitlines()[:30])
    block = FENCE.search(first_screen)
    assert block, "the README's first screen shows the set-up commands in a code block"
    commands = [line.split("#")[0].strip() for line in block.group(2).splitlines() if line.strip()]
    assert commands == ["make run", "make test"]


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 200


LINK = re.compile(r"\]\(([^)\s]+)\)")


def github_slugs(markdown: Path) -> set[str]:
    """The anchors GitHub makes for a page's headings (lower case, punctuation dropped, spaces to -)."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", markdown.read_text(encoding="utf-8")), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "Makefile"], ids=lambda p: p.name)
def test_links_outside_the_site_resolve(page):
    """README.md is read on GitHub, not in the site: its links and anchors are checked here."""
    text = page.read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if "://" not in t and not t.startswith("#")]
    targets += re.findall(r"\b((?:docs|e2e)/[\w./-]+\.md)\b", text)
    assert targets
    for target in targets:
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"{page.name} points at {target}, which does not exist"
        if anchor:
            assert anchor in github_slugs(ROOT / path), f"{page.name} points at {target}: no such heading"


# --- rule numbers ----------------------------------------------------------------------------------

SPEC_RULES = re.findall(r"^\| ([A-Z]\d+[a-z]?) \|", (DOCS / "specification.md").read_text(encoding="utf-8"), re.M)


def test_rule_ranges_cited_in_the_docs_cover_the_whole_group():
    """"rules G1-G13" on a page while the specification has G14 is how the README drifted."""
    last: dict[str, int] = {}
    for rule in SPEC_RULES:
        last[rule[0]] = max(last.get(rule[0], 0), int(re.match(r"[A-Z](\d+)", rule).group(1)))
    cited = [(p, m) for p in PAGES if p.name != "specification.md"
             for m in re.finditer(r"\b([A-Z])1-\1?(\d+)\b", p.read_text(encoding="utf-8"))]
    assert cited
    for page, m in cited:
        group, end = m.group(1), int(m.group(2))
        if group in last:
            where = page.relative_to(ROOT)
            assert end == last[group], f"{where} cites {m.group(0)}; the specification ends at {group}{last[group]}"


def test_rules_cited_in_the_docs_exist():
    cited = 0
    for page in PAGES:
        for m in re.finditer(r"\b[Rr]ules? ((?:[A-Z]\d+[a-z]?(?:, | and | or )?)+)", page.read_text(encoding="utf-8")):
            for rule in re.findall(r"[A-Z]\d+[a-z]?", m.group(1)):
                cited += 1
                assert rule in SPEC_RULES, f"{page.relative_to(ROOT)} cites rule {rule}, which docs/specification.md lacks"
    assert cited > 20, "the docs cite the specification's rules: the pattern above finds them"


# --- configuration shown in the docs ---------------------------------------------------------------

YAML_BLOCK = re.compile(r"^(```+)ya?ml\n(.*?)^\1\s*$", re.S | re.M)
CONFIG_SECTIONS = {"zoneTopologySpread", "hostTopologySpread", "removePodAntiAffinity", "volcano", "gang",
                   "controller", "webhook"}


def config_blocks(page: Path) -> list[dict]:
    import yaml

    blocks = []
    for m in YAML_BLOCK.finditer(page.read_text(encoding="utf-8")):
        try:
            data = yaml.safe_load(m.group(2))
        except yaml.YAMLError:
            continue
        if isinstance(data, dict) and data and set(data) <= CONFIG_SECTIONS:
            blocks.append(data)
    return blocks


def test_every_config_shown_in_the_docs_loads():
    from policylib import ConfigError, load_config

    shown = [(p, b) for p in PAGES for b in config_blocks(p)]
    assert len(shown) >= 4
    for page, block in shown:
        try:
            load_config(block)
        except ConfigError as e:  # a renamed or removed key
            pytest.fail(f"{page.relative_to(ROOT)} shows a config that does not load: {e}")


@pytest.mark.parametrize("page", ["docs/configuration.md", "docs/controller.md", "docs/concepts/kubeflow.md"])
def test_the_defaults_shown_are_the_defaults(page):
    from policylib import load_config

    (block,) = config_blocks(ROOT / page)
    assert load_config(block) == load_config(None)


# --- command lines quoted in the docs --------------------------------------------------------------

def _accepted_options() -> dict[tuple[str, str], set[str]]:
    """(program, command) -> every option string its parser accepts."""
    from policylib import cli
    from webhook import __main__ as webhook_main

    accepted = {}
    for program, build in (("policylib", cli.build_parser), ("python -m webhook", webhook_main.parser)):
        top = GEN.record(build)
        for name, (cmd, _) in top.subcommands.items():
            accepted[(program, name)] = {o for action, _, _ in cmd.actions for o in action.option_strings}
    return accepted


QUOTED_COMMAND = re.compile(r"(?:^|`|\$ )(policylib|python -m webhook) ([a-z][a-z-]*)((?:[^`\n]|\\\n)*)", re.M)


def test_every_flag_quoted_in_the_docs_exists():
    """Synopses and commands quoted on any page (`policylib plan [--config FILE] ...`) use real flags."""
    accepted = _accepted_options()
    checked = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8").replace("\\\n", " ")
        for m in QUOTED_COMMAND.finditer(text):
            program, command, rest = m.groups()
            if (program, command) not in accepted:
                continue
            rest = rest.split(" # ")[0].split("  #")[0]
            for option in re.findall(r"(?<![\w/.-])(--?[A-Za-z][\w-]*)", rest):
                checked += 1
                assert option in accepted[(program, command)], (
                    f"{page.relative_to(ROOT)}: `{program} {command}` has no option {option}")
    assert checked > 50


def test_one_minimum_kubernetes_version():
    """docs/install.md's minimum, README's, the Helm chart's kubeVersion and the version the manifests are
    validated against are one version; the chart's upper bound is the minor after the newest one the end-to-end
    tests run (a newer Kubernetes is refused until they run it)."""
    from tests import test_manifests
    from tests.e2e.harness import MINORS
    install = re.search(r"Minimum Kubernetes: (\d+\.\d+)\.", (ROOT / "docs" / "install.md").read_text()).group(1)
    readme = re.search(r"Minimum Kubernetes: (\d+\.\d+)\.", (ROOT / "README.md").read_text()).group(1)
    chart = yaml.safe_load((ROOT / "charts" / "policylib" / "Chart.yaml").read_text())["kubeVersion"]
    major, minor = max(tuple(map(int, m.split("."))) for m in MINORS)
    assert (readme, chart, test_manifests.K8S_VERSION) == (
        install, f">={install}.0-0 <{major}.{minor + 1}.0-0", f"{install}.0")

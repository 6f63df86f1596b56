"""The layers, enforced (docs/architecture.md): an import that runs back up fails the suite.

    webhook/            the server, the controller, certificates, the HPA cache, informers
    policylib.cli       the ``policylib`` console script
    policylib.shell     files (configuration, manifests) and the cluster (the API client)
    policylib           the pure core: dicts and settings in, results out

Each layer imports only what is below it. The core does no I/O: no module that reads files, opens
sockets, runs processes or talks to the cluster or the terminal, and no call of ``open``, ``print`` or
``input``; its third-party imports are parsers and data libraries only. Imports inside functions count.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Third-party packages the core may use: parsing and data, no I/O.
#: numpy: the simulator's per-node arrays (pure computation, no I/O).
CORE_THIRD_PARTY = {"yaml", "jsonschema", "numpy"}
#: Standard-library modules that do I/O (files, network, processes, the terminal, threads).
IO_STDLIB = {"os", "sys", "io", "pathlib", "socket", "ssl", "http", "urllib", "subprocess", "shutil", "tempfile",
             "glob", "select", "selectors", "signal", "threading", "asyncio", "multiprocessing", "logging",
             "fileinput", "mmap", "sqlite3", "smtplib", "ftplib", "webbrowser", "builtins", "importlib"}
IO_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


def test_the_cores_third_party_packages_are_requirements_of_the_base_install():
    """The core runs from ``pip install policylib`` (no extra): what it may import is installed there."""
    import configparser

    from packaging.requirements import Requirement
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    base = {Requirement(line).name.lower() for line in setup["options"]["install_requires"].splitlines()
            if line.strip() and not line.strip().startswith("#")}
    distribution = {"yaml": "pyyaml"}
    assert {distribution.get(m, m) for m in CORE_THIRD_PARTY} <= base


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str:
    if module == "webhook" or module.startswith("webhook."):
        return "webhook"
    if module == "policylib.cli" or module.startswith("policylib.cli."):
        return "cli"
    if module == "policylib.shell" or module.startswith("policylib.shell."):
        return "shell"
    if module == "policylib":
        return "facade"
    return "core"


def imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``tree``, relative ones resolved."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "__future__":
                continue
            # ``from . import kube`` imports the submodule policylib.shell.kube
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return found


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """What ``module`` (its ``source``) imports or calls against its layer."""
    tree = ast.parse(source)
    mine = layer(module)
    out = []
    for line, target in imports(tree, module, is_package):
        top = target.split(".")[0]
        theirs = layer(target) if top in ("policylib", "webhook") else None
        where = f"{module}:{line} imports {target}"
        if mine == "core":
            if theirs in ("shell", "cli", "webhook"):
                out.append(f"{where}: the core imports nothing above it")
            elif top in IO_STDLIB:
                out.append(f"{where}: the core does no I/O")
            elif theirs is None and top not in sys.stdlib_module_names and top not in CORE_THIRD_PARTY:
                out.append(f"{where}: not a parser or data library the core may use")
        elif mine == "shell" and theirs in ("cli", "webhook"):
            out.append(f"{where}: the shell is below the CLI and the webhook")
        elif mine == "cli" and theirs == "webhook":
            out.append(f"{where}: the CLI is below the webhook (cluster access is in policylib.shell)")
        elif mine == "facade" and theirs in ("cli", "webhook"):
            out.append(f"{where}: the package imports neither the CLI nor the webhook")
    if mine == "core":
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_CALLS:
                out.append(f"{module}:{node.lineno} calls {node.func.id}(): the core does no I/O")
    return out


def sources() -> list[Path]:
    return sorted(p for pkg in ("policylib", "webhook") for p in (ROOT / pkg).rglob("*.py"))


def test_every_import_respects_the_layers():
    found = []
    for path in sources():
        found += violations(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
    assert found == []


def test_the_layers_cover_every_module():
    names = {module_name(p) for p in sources()}
    assert {"policylib.config", "policylib.cli", "policylib.shell.files", "policylib.shell.kube",
            "webhook.controller"} <= names
    assert {layer(n) for n in names} == {"core", "cli", "shell", "facade", "webhook"}


@pytest.mark.parametrize("module,source,expected", [
    ("policylib.cli", "def f():\n    from webhook import kube\n", "imports webhook.kube"),
    ("policylib.spread", "from .shell import kube\n", "imports policylib.shell.kube"),
    ("policylib.gang.jobs", "from ..cli import main\n", "imports policylib.cli.main"),
    ("policylib.config", "from pathlib import Path\n", "the core does no I/O"),
    ("policylib.plan", "import kubernetes.client\n", "not a parser or data library"),
    ("policylib.check", "def f(p):\n    return open(p).read()\n", "calls open()"),
    ("policylib.shell.files", "import webhook.server\n", "the shell is below"),
    ("policylib", "from .cli import main\n", "neither the CLI nor the webhook"),
])
def test_an_import_that_runs_back_up_is_caught(module, source, expected):
    found = violations(source, module, is_package=module == "policylib")
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("module,source", [
    ("webhook.server", "import policylib.cli\nfrom policylib.shell import kube\n"),
    ("policylib.cli", "from .shell import kube\nimport os\n"),
    ("policylib.spread", "from .config import Config\nimport yaml\nimport re\n"),
    ("policylib", "from .shell.files import load_config\n"),
])
def test_imports_down_the_layers_are_allowed(module, source):
    assert violations(source, module, is_package=module == "policylib") == []


def test_api_constants_are_defined_once():
    """whenUnsatisfiable's values live in policylib.validation, the int32 bound in policylib.errors;
    every other module imports them (a literal elsewhere is a second definition)."""
    homes = {"DoNotSchedule": "policylib.validation", "ScheduleAnyway": "policylib.validation",
             2**31 - 1: "policylib.errors", 2**31: "policylib.errors"}
    found = []
    for path in sources():
        module = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and ast.unparse(node) == "2 ** 31":
                value = 2**31
            if not isinstance(value, bool) and value in homes and homes[value] != module:
                found.append(f"{module}:{node.lineno}: {value!r}")
    assert found == []

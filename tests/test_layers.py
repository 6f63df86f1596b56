"""The layers, enforced (docs/architecture.md): an import that runs back up fails the suite.

    webhook/            the server, the controller, certificates, the HPA cache, informers
    policylib.cli       the ``policylib`` console script
    policylib.shell     files (configuration, manifests) and the cluster (the API client)
    policylib           the pure core: dicts and settings in, results out

Each layer imports only what is below it: import-linter's contracts in ``.importlinter`` say so, and
``lint-imports`` runs here. What they cannot say is checked below from the modules' own imports: the core
does no I/O (no module that reads files, opens sockets, runs processes or talks to the cluster or the
terminal, and no call of ``open``, ``print`` or ``input``), its third-party imports are parsers and data
libraries only, and the package's front door (``policylib/__init__.py``, which no layer of the contract
holds) imports neither the CLI nor the webhook. Imports inside functions count.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

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


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the packages under ``root``, with the ``.importlinter`` there."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)


def test_every_import_keeps_the_import_contracts():
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_an_import_that_breaks_a_contract_fails_lint_imports(tmp_path: Path):
    """The contracts hold what they say: a core module importing the CLI, a module placed in no layer, the
    shell importing the webhook, a circle inside the CLI and the controller importing the admission server each
    break one, by name."""
    for package in ("policylib", "webhook"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path)
    with open(tmp_path / "policylib" / "labels.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef _up():\n    from .cli import main\n    return main\n")
    (tmp_path / "policylib" / "unplaced.py").write_text('"""A module no layer lists."""\n', encoding="utf-8")
    with open(tmp_path / "policylib" / "shell" / "files.py", "a", encoding="utf-8") as f:
        f.write("\nimport webhook  # noqa: E402,F401\n")
    with open(tmp_path / "policylib" / "cli" / "completion.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef _parser():\n    from .app import build_parser\n    return build_parser()\n")
    with open(tmp_path / "webhook" / "controller" / "served.py", "a", encoding="utf-8") as f:
        f.write("\n\ndef _admission():\n    from ..admission import review\n    return review\n")
    out = lint_imports(tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    for expected in ("policylib.labels is not allowed to import policylib.cli", "- policylib.unplaced",
                     "policylib.shell.files -> webhook", "No cycles are allowed in policylib.cli.",
                     "- .completion -> .app", "webhook.controller is not allowed to import webhook.admission",
                     "Contracts: 0 kept, 4 broken."):
        assert expected in out.stdout, out.stdout


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_core(module: str) -> bool:
    """Every module of policylib but the package itself, the CLI and the shell."""
    parts = module.split(".")
    return parts[0] == "policylib" and len(parts) > 1 and parts[1] not in ("cli", "shell")


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
    """What ``module`` (its ``source``) imports or calls against the rules import-linter cannot check."""
    tree = ast.parse(source)
    out = []
    for line, target in imports(tree, module, is_package):
        top = target.split(".")[0]
        where = f"{module}:{line} imports {target}"
        if module == "policylib" and (top == "webhook" or target.startswith("policylib.cli")):
            out.append(f"{where}: the package imports neither the CLI nor the webhook")
        elif is_core(module) and top in IO_STDLIB:
            out.append(f"{where}: the core does no I/O")
        elif is_core(module) and top not in ("policylib", "webhook") and top not in sys.stdlib_module_names \
                and top not in CORE_THIRD_PARTY:
            out.append(f"{where}: not a parser or data library the core may use")
    if is_core(module):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_CALLS:
                out.append(f"{module}:{node.lineno} calls {node.func.id}(): the core does no I/O")
    return out


def sources() -> list[Path]:
    return sorted(p for pkg in ("policylib", "webhook") for p in (ROOT / pkg).rglob("*.py"))


def test_the_core_does_no_io_and_the_package_imports_no_layer_above_it():
    found = []
    for path in sources():
        found += violations(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
    assert found == []


@pytest.mark.parametrize("module,source,expected", [
    ("policylib.config", "from pathlib import Path\n", "the core does no I/O"),
    ("policylib.spread.write", "def f():\n    import subprocess\n", "the core does no I/O"),
    ("policylib.plan", "import kubernetes.client\n", "not a parser or data library"),
    ("policylib.check", "def f(p):\n    return open(p).read()\n", "calls open()"),
    ("policylib", "from .cli import main\n", "neither the CLI nor the webhook"),
    ("policylib", "import webhook.server\n", "neither the CLI nor the webhook"),
])
def test_what_import_linter_cannot_check_is_caught(module, source, expected):
    found = violations(source, module, is_package=module == "policylib")
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("module,source", [
    ("webhook.server", "import policylib.cli\nfrom policylib.shell import kube\nimport os\n"),
    ("policylib.cli", "from .shell import kube\nimport os\n"),
    ("policylib.shell.files", "from pathlib import Path\nimport yaml\n"),
    ("policylib.spread", "from .config import Config\nimport yaml\nimport re\n"),
    ("policylib", "from .shell.files import load_config\n"),
])
def test_io_outside_the_core_and_parsers_inside_it_are_allowed(module, source):
    assert violations(source, module, is_package=module == "policylib") == []


def test_api_constants_are_defined_once():
    """whenUnsatisfiable's values live in policylib.constants, the int32 bound in policylib.errors;
    every other module imports them (a literal elsewhere is a second definition)."""
    homes = {"DoNotSchedule": "policylib.constants", "ScheduleAnyway": "policylib.constants",
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

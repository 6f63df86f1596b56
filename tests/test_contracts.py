"""Contracts over the whole tree, read from the source (docs/architecture.md, "Seams, logs and contracts"):

- logging: messages are constant strings, values go in ``extra=`` (never ``json.dumps`` into a message,
  never %-formatted or f-string values), every module logs through ``logging.getLogger(__name__)``;
- tests: a test whose only assertions sit inside a loop over something computed could assert nothing;
- comments and docstrings cite the specification's rules, never the project's issue numbers.
"""
from __future__ import annotations

import ast
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The Python the project owns (not the virtualenv, not Go's build output).
TREES = ("policylib", "webhook", "tests", "tools", "bench")
LEVELS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}


def sources(*trees: str) -> list[Path]:
    return sorted(p for tree in trees for p in (ROOT / tree).rglob("*.py") if ".venv" not in p.parts)


# --- logging -------------------------------------------------------------------------------------

def _get_logger(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "getLogger"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "logging")


def _constant(message: ast.expr) -> bool:
    """A constant string, or a choice between constant strings (``"leader" if leading else "not leader"``)."""
    if isinstance(message, ast.IfExp):
        return _constant(message.body) and _constant(message.orelse)
    return isinstance(message, ast.Constant) and isinstance(message.value, str)


def log_call_problems(source: str) -> list[tuple[int, str]]:
    """(line, what) of every log call whose message is not a constant string, or that passes values as
    arguments of the message (``%s``), or builds JSON into it. A log call is a level method called on
    ``logging``, on ``logging.getLogger(...)``, or on a name bound to one (``log``, ``logger``, ...)."""
    tree = ast.parse(source)
    loggers = {"log", "logger", "logging"} | {
        target.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and _get_logger(node.value)
        for target in node.targets if isinstance(target, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LEVELS):
            continue
        receiver = node.func.value
        if not (_get_logger(receiver) or (isinstance(receiver, ast.Name) and receiver.id in loggers)):
            continue
        args = node.args[1:] if node.func.attr == "log" else node.args
        if not args:
            continue
        message, rest = args[0], args[1:]
        if any("dumps" in ast.unparse(a) for a in args):
            found.append((node.lineno, "JSON built into the message: pass the fields in extra="))
        elif not _constant(message):
            found.append((node.lineno, "a message that is not a constant string: put the values in extra="))
        elif rest:
            found.append((node.lineno, "%-formatted values: put them in extra="))
    return found


def test_the_log_check_finds_each_style_it_forbids():
    bad = ('log.info(json.dumps({"msg": "x", "a": 1}))\n'
           'log.warning("read of %s failed: %s", name, e)\n'
           'log.error(f"lost {name}")\n'
           'logging.getLogger(__name__).info("a" + b)\n'
           'log.log(logging.INFO, "n=%d", n)\n'
           'errors = logging.getLogger("webhook.app")\nerrors.error("policy raised %s", name)\n')
    good = ('log.info("certificates", extra={"action": a})\nlog.exception("reconcile failed", extra={"key": k})\n'
            'self.log.debug("TLS handshake with %s failed", addr)\n'   # another library's logger (gunicorn's)
            'log.info("leader" if leading else "not leader", extra={"identity": i})\n')
    assert [line for line, _ in log_call_problems(bad)] == [1, 2, 3, 4, 5, 7]
    assert log_call_problems(good) == []


def test_every_log_call_has_a_constant_message_and_its_values_in_extra():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {what}" for path in sources(*TREES)
                 for line, what in log_call_problems(path.read_text(encoding="utf-8"))]
    assert offenders == []


def test_every_module_logger_is_named_after_its_module():
    named = re.compile(r"getLogger\((?P<arg>[^)]*)\)")
    offenders = []
    for path in sources("policylib", "webhook"):
        for m in named.finditer(path.read_text(encoding="utf-8")):
            if m["arg"] not in ("__name__", "", "REVIEW_LOG"):   # "": the root logger, where the handler goes
                offenders.append(f"{path.relative_to(ROOT)}: getLogger({m['arg']})")
    assert offenders == []


# --- tests that may assert nothing ---------------------------------------------------------------

def _fixed(iterable: ast.expr, literals: frozenset[str] = frozenset()) -> bool:
    """An iterable the test wrote down: a literal (or a local name bound to one), a module constant
    (``MATRIX``, ``MATRIX.items()``), a ``range`` of a constant, or one of those through
    enumerate/zip/sorted/itertools.product."""
    if isinstance(iterable, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
        return len(getattr(iterable, "elts", getattr(iterable, "keys", []))) > 0
    if isinstance(iterable, ast.Name):
        return iterable.id.isupper() or iterable.id in literals
    if isinstance(iterable, ast.Call):
        func = ast.unparse(iterable.func)
        if isinstance(iterable.func, ast.Attribute) and iterable.func.attr in ("items", "keys", "values"):
            return _fixed(iterable.func.value, literals)
        if func == "range":
            return all(isinstance(a, ast.Constant) for a in iterable.args)
        if func in ("enumerate", "zip", "sorted", "reversed", "itertools.product", "product"):
            return bool(iterable.args) and all(_fixed(a, literals) for a in iterable.args)
    return False


def _asserting(node: ast.AST) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.With):
        return any("raises" in ast.unparse(item.context_expr) for item in node.items)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        name = ast.unparse(node.value.func).rpartition(".")[2]
        return name.startswith(("assert", "check_", "expect"))
    return False


def assertions(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
    """(assertions no loop guards, assertions only inside loops over something computed) of a test."""
    sure, maybe = 0, 0
    literals = frozenset(target.id for node in ast.walk(function) if isinstance(node, ast.Assign)
                         and _fixed(node.value) for target in node.targets if isinstance(target, ast.Name))

    def visit(body: list[ast.stmt], guarded: bool) -> None:
        nonlocal sure, maybe
        for stmt in body:
            if _asserting(stmt):
                if guarded:
                    maybe += 1
                else:
                    sure += 1
            if isinstance(stmt, (ast.For, ast.AsyncFor)):
                visit(stmt.body, guarded or not _fixed(stmt.iter, literals))
                visit(stmt.orelse, guarded)
            elif isinstance(stmt, ast.While):
                visit(stmt.body, True)
                visit(stmt.orelse, guarded)
            elif isinstance(stmt, (ast.If, ast.Try, ast.With, ast.AsyncWith)):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, field, []), guarded)
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body, guarded)
    visit(function.body, False)
    return sure, maybe


def loop_only_tests(source: str) -> list[str]:
    return [f"{node.lineno} {node.name}" for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
            and assertions(node) == (0, assertions(node)[1]) and assertions(node)[1] > 0]


def test_the_loop_check_finds_a_test_that_may_assert_nothing():
    source = ("def test_a():\n    for x in compute():\n        assert x\n"
              "def test_b():\n    for x in (1, 2):\n        assert x\n"
              "def test_c():\n    xs = compute()\n    assert xs\n    for x in xs:\n        assert x\n"
              "def test_d():\n    for name, v in MATRIX.items():\n        assert v\n")
    assert loop_only_tests(source) == ["1 test_a"]


def test_no_test_asserts_only_inside_a_loop_that_may_run_zero_times():
    offenders = [f"{path.relative_to(ROOT)}:{found}" for path in sources("tests")
                 for found in loop_only_tests(path.read_text(encoding="utf-8"))]
    assert offenders == []


# --- citations -----------------------------------------------------------------------------------

ISSUE = re.compile(r"\b[Ii]ssues? #?\d+\b|\(#\d+\)")
#: Upstream projects' issues and pull requests may be cited by name (``volcano issue 5401``): users can read them.
UPSTREAM = re.compile(r"\b(volcano|kubernetes|gevent|gunicorn|helm|kubeflow|urllib3|client-go|cpython|python|"
                      r"flask|kopf|kustomize|containerd|runc|etcd|koordinator)(-sh)?[ /]*(issues?|#|pull)", re.IGNORECASE)


def cited_issues(path: Path) -> list[str]:
    """Comments and docstrings of ``path`` that cite an issue of this project by number."""
    found = []
    with path.open("rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if tok.type not in (tokenize.COMMENT, tokenize.STRING):
                continue
            for m in ISSUE.finditer(tok.string):
                before = tok.string[max(0, m.start() - 40):m.end()]
                if not UPSTREAM.search(before):
                    found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {m.group(0)}")
    return found


def test_code_cites_rules_not_issue_numbers():
    offenders = [hit for path in sources("policylib", "webhook", "tools", "tests") for hit in cited_issues(path)]
    assert offenders == []

"""tools/test_streams.py, what `make test` runs: every test file in exactly one of two pytest processes, the
real-node files all in one, and the exit status of a failing stream."""
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import test_streams  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def test_every_test_file_of_the_suite_is_in_exactly_one_stream():
    s = test_streams.streams()
    node, cluster = s["node"], s["cluster"]
    every = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))
    assert sorted(node + cluster) == every
    assert not set(node) & set(cluster)
    real = [f for f in every if f.startswith("tests/e2e/test_real_node")]
    assert len(real) >= 5
    assert node[:len(real)] == real  # first, one after another, in the one stream
    assert all(f.startswith("tests/e2e/") for f in cluster)
    assert not any("test_real_node" in f for f in cluster)
    assert "tests/test_test_streams.py" in node


def tree(tmp_path: Path, cluster_passes: bool) -> Path:
    tests = tmp_path / "tests"
    (tests / "e2e").mkdir(parents=True)
    (tests / "e2e" / "test_real_node_a.py").write_text("def test_a():\n    assert True\n")
    (tests / "e2e" / "test_b.py").write_text(f"def test_b():\n    assert {cluster_passes}\n")
    (tests / "test_c.py").write_text("def test_c():\n    assert True\n")
    return tests


def test_a_streams_split_of_a_small_tree(tmp_path):
    tests = tree(tmp_path, True)
    assert test_streams.streams(tests) == {
        "node": [str(tests / "e2e" / "test_real_node_a.py"), str(tests / "test_c.py")],
        "cluster": [str(tests / "e2e" / "test_b.py")]}


@pytest.mark.parametrize("cluster_passes,code", [(True, 0), (False, 1)])
def test_both_streams_run_and_a_failure_is_the_exit_status(tmp_path, capfd, cluster_passes, code):
    tests, logs = tree(tmp_path, cluster_passes), tmp_path / "logs"
    assert test_streams.run_streams(tests, logs) == code
    out = capfd.readouterr().out
    assert "[node] " in out and "[cluster] " in out
    assert f"stream cluster: pytest exited {code}" in out and "stream node: pytest exited 0" in out
    assert "2 passed" in (logs / "node.log").read_text()
    assert ("1 passed" if cluster_passes else "1 failed") in (logs / "cluster.log").read_text()
    end = out[out.rindex("[cluster] "):]  # after the last prefixed line: what a CI log's tail shows
    if cluster_passes:
        assert "---- stream" not in out
    else:
        assert "---- stream cluster: the end of its log ----" in end and "---- stream node" not in out
        assert re.search(r"^FAILED \S*tests/e2e/test_b\.py::test_b", end, re.M), end


def test_the_callers_signal_handlers_are_back_afterwards(tmp_path, capfd):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert test_streams.run_streams(tree(tmp_path, True), tmp_path / "logs") == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_the_summary_of_a_log_is_pytests_short_summary_else_its_last_lines(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("a\n=== short test summary info ===\nFAILED x::y\n=== 1 failed ===\n")
    assert test_streams.summary(log) == "=== short test summary info ===\nFAILED x::y\n=== 1 failed ===\n"
    log.write_text("".join(f"{i}\n" for i in range(100)))
    assert test_streams.summary(log, tail=3) == "97\n98\n99\n"


def test_arguments_run_one_pytest_with_them(tmp_path):
    tests = tree(tmp_path, False)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "test_streams.py"), str(tests / "test_c.py"),
                          "-p", "no:cacheprovider"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed" in out.stdout and "[node]" not in out.stdout


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_stops_both_streams_through_their_teardown(tmp_path, sigint):
    """Also when the caller ignores SIGINT (started in the background by a shell without job control, as a CI
    runner may): the pytests must not inherit that, or the SIGINT they are told to stop with does nothing."""
    tests = tmp_path / "tests"
    (tests / "e2e").mkdir(parents=True)
    waiting = '''import pathlib, time, pytest
@pytest.fixture
def held():
    pathlib.Path("{d}/{n}.started").touch()
    yield
    pathlib.Path("{d}/{n}.torn-down").touch()
def test_waits(held):
    time.sleep(600)
'''
    (tests / "e2e" / "test_real_node_a.py").write_text(waiting.format(d=tmp_path, n="node"))
    (tests / "e2e" / "test_b.py").write_text(waiting.format(d=tmp_path, n="cluster"))
    ignore = "signal.signal(signal.SIGINT, signal.SIG_IGN); " if sigint == "ignored" else ""
    script = (f"import signal, sys; {ignore}sys.path.insert(0, {str(ROOT / 'tools')!r}); import test_streams, pathlib; "
              f"sys.exit(test_streams.run_streams(pathlib.Path({str(tests)!r}), pathlib.Path({str(tmp_path / 'logs')!r})))")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"{n}.started").exists() for n in ("node", "cluster")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0].decode()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=test_streams.STOP_SECONDS + 60)[0].decode()  # a stream not stopping is killed
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert (tmp_path / "node.torn-down").exists() and (tmp_path / "cluster.torn-down").exists(), out


def test_a_stream_without_files_is_not_started(tmp_path, capfd):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_c.py").write_text("def test_c():\n    assert True\n")
    assert test_streams.run_streams(tests, tmp_path / "logs") == 0
    out = capfd.readouterr().out
    assert "stream node: pytest exited 0" in out and "stream cluster" not in out
    assert "1 passed" in (tmp_path / "logs" / "node.log").read_text()

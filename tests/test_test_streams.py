"""tools/test_streams.py, what `make test` runs: every test file in exactly one pytest job, the real-node files all in
one job started first, a few jobs at a time, longest first, and the exit status of a failing job."""
import fcntl
import json
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


@pytest.fixture(autouse=True)
def own_real_node_lock(tmp_path, monkeypatch):
    """The small trees' real-node jobs lock a file of their own, never the machine's (a real run may hold it)."""
    monkeypatch.setattr(test_streams, "REAL_NODE_LOCK", tmp_path / "real-node.lock")


def test_every_test_file_of_the_suite_is_in_exactly_one_job():
    jobs = test_streams.jobs()
    every = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))
    listed = [f for files in jobs.values() for f in files]
    assert sorted(listed) == every and len(listed) == len(set(listed))
    real = [f for f in every if f.startswith("tests/e2e/test_real_node")]
    assert len(real) >= 5
    assert jobs["real-node"] == real  # one after another, in the one job
    assert jobs["units"] == [f for f in every if not f.startswith("tests/e2e/")]
    others = {name: files for name, files in jobs.items() if name not in ("real-node", "units")}
    assert all(files == [f"tests/e2e/test_{name}.py"] for name, files in others.items())
    assert "tests/test_test_streams.py" in jobs["units"]


def tree(tmp_path: Path, passes: bool = True) -> Path:
    tests = tmp_path / "tests"
    (tests / "e2e").mkdir(parents=True)
    (tests / "e2e" / "test_real_node_a.py").write_text("def test_a():\n    assert True\n")
    (tests / "e2e" / "test_b.py").write_text(f"def test_b(tmp_path):\n    (tmp_path / 'here').touch()\n"
                                             f"    assert {passes}\n")
    (tests / "e2e" / "test_d.py").write_text("def test_d(tmp_path):\n    (tmp_path / 'here').touch()\n")
    (tests / "test_c.py").write_text("def test_c():\n    assert True\n")
    return tests


def test_the_jobs_of_a_small_tree(tmp_path):
    tests = tree(tmp_path)

    def named(path):  # relative to the checkout where the tree is inside it (make test's --basetemp), else whole
        return str(path.relative_to(test_streams.ROOT)) if path.is_relative_to(test_streams.ROOT) else str(path)

    assert test_streams.jobs(tests) == {"real-node": [named(tests / "e2e" / "test_real_node_a.py")],
                                        "units": [named(tests / "test_c.py")],
                                        "b": [named(tests / "e2e" / "test_b.py")],
                                        "d": [named(tests / "e2e" / "test_d.py")]}


def test_the_longest_jobs_start_first_after_the_real_node_job(tmp_path):
    tests, logs = tree(tmp_path), tmp_path / "logs"
    jobs = test_streams.jobs(tests)
    logs.mkdir()
    (tests / "e2e" / "test_d.py").write_text("def test_d():\n    assert True\n" + "# padding\n" * 100)
    assert test_streams.order(jobs, logs) == ["real-node", "d", "b", "units"]  # before any run: by size
    (logs / "durations.json").write_text(json.dumps({"real-node": 1.0, "units": 9.0, "b": 5.0, "d": 2.0}))
    assert test_streams.order(jobs, logs) == ["real-node", "units", "b", "d"]  # then the last run's durations
    (logs / "durations.json").write_text(json.dumps({"real-node": 1.0, "units": 9.0, "b": 5.0}))
    assert test_streams.order(jobs, logs) == ["real-node", "d", "b", "units"]  # a job it did not have: by size


@pytest.mark.parametrize("passes,code", [(True, 0), (False, 1)])
def test_every_job_runs_and_a_failure_is_the_exit_status(tmp_path, capfd, passes, code):
    tests, logs = tree(tmp_path, passes), tmp_path / "logs"
    assert test_streams.run_jobs(tests, logs, at_once=2, tmp=tmp_path / "tmp") == code
    out = capfd.readouterr().out
    assert {"[real-node] ", "[units] ", "[b] ", "[d] "} <= set(re.findall(r"^\[[a-z-]+\] ", out, re.M))
    assert f"job b: pytest exited {code} after" in out and "job d: pytest exited 0 after" in out
    assert "4 jobs, 2 at a time: " in out
    for name in ("real-node", "units", "d"):
        assert "1 passed" in (logs / f"{name}.log").read_text()
    assert ("1 passed" if passes else "1 failed") in (logs / "b.log").read_text()
    assert set(json.loads((logs / "durations.json").read_text())) == {"real-node", "units", "b", "d"}
    # each job's --basetemp: a failed job's kept, a passing job's removed
    kept = [p.relative_to(tmp_path / "tmp") for p in (tmp_path / "tmp").rglob("here")]
    assert kept == ([] if passes else [Path("b/test_b0/here")])
    lines = out.splitlines()
    last = max(i for i, line in enumerate(lines) if re.match(r"\[[a-z-]+\] ", line))
    end = "\n".join(lines[last + 1:])  # after the last prefixed line: what a CI log's tail shows
    if passes:
        assert "---- job" not in out
    else:
        assert "---- job b: the end of its log ----" in end and "---- job d" not in out
        assert re.search(r"^FAILED \S*tests/e2e/test_b\.py::test_b", end, re.M), end


def test_no_more_jobs_than_workers_run_at_once(tmp_path, capfd):
    tests = tmp_path / "tests"
    (tests / "e2e").mkdir(parents=True)
    held = '''import os, pathlib, time
def test_one_at_a_time():
    running = pathlib.Path("{d}") / "running"
    running.mkdir(exist_ok=True)
    mine = running / str(os.getpid())
    mine.touch()
    time.sleep(1)
    assert [p.name for p in running.iterdir()] == [mine.name]
    mine.unlink()
'''
    for name in ("test_b.py", "test_d.py", "test_e.py"):
        (tests / "e2e" / name).write_text(held.format(d=tmp_path))
    assert test_streams.run_jobs(tests, tmp_path / "logs", at_once=1, tmp=tmp_path / "tmp") == 0, capfd.readouterr().out


def test_the_callers_signal_handlers_are_back_afterwards(tmp_path, capfd):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert test_streams.run_jobs(tree(tmp_path), tmp_path / "logs", tmp=tmp_path / "tmp") == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_the_summary_of_a_log_is_pytests_short_summary_else_its_last_lines(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("a\n=== short test summary info ===\nFAILED x::y\n=== 1 failed ===\n")
    assert test_streams.summary(log) == "=== short test summary info ===\nFAILED x::y\n=== 1 failed ===\n"
    log.write_text("".join(f"{i}\n" for i in range(100)))
    assert test_streams.summary(log, tail=3) == "97\n98\n99\n"


def test_the_real_node_job_waits_for_the_machines_lock_while_the_other_jobs_run(tmp_path):
    """Another run holding the lock (as ``flock FILE pytest ...`` or a second checkout's make test does): the
    real-node job says so and starts only once it is released; the other jobs do not wait for it."""
    tests, logs, lock = tree(tmp_path), tmp_path / "logs", tmp_path / "held.lock"
    run = ("import sys; sys.path.insert(0, sys.argv[1]); import test_streams; from pathlib import Path; "
           "sys.exit(test_streams.run_jobs(Path(sys.argv[2]), Path(sys.argv[3]), at_once=4, tmp=Path(sys.argv[4]), "
           "real_node_lock=Path(sys.argv[5])))")
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        runner = subprocess.Popen([sys.executable, "-c", run, str(ROOT / "tools"), str(tests), str(logs),
                                   str(tmp_path / "tmp"), str(lock)], stdout=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 240
            others = [logs / f"{name}.log" for name in ("units", "b", "d")]
            while time.monotonic() < deadline and not all(p.exists() and " passed" in p.read_text() for p in others):
                time.sleep(0.2)
            assert all(" passed" in p.read_text() for p in others)   # done while the lock was held
            assert (logs / "real-node.log").read_text() == \
                f"waiting for {lock}: another run's real-node tests hold it\n"
            assert runner.poll() is None
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
        out, _ = runner.communicate(timeout=240)
    assert runner.returncode == 0, out
    assert "1 passed" in (logs / "real-node.log").read_text()


def test_arguments_run_one_pytest_with_them(tmp_path):
    tests = tree(tmp_path, False)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "test_streams.py"), str(tests / "test_c.py"),
                          "-p", "no:cacheprovider"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed" in out.stdout and "[units]" not in out.stdout


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_worker_count_is_refused(monkeypatch, value):
    monkeypatch.setenv("POLICYLIB_TEST_WORKERS", value)
    with pytest.raises(SystemExit, match=f"POLICYLIB_TEST_WORKERS='{value}': must be a whole number of at least 1"):
        test_streams.workers()


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_stops_every_running_job_through_its_teardown_and_starts_no_other(tmp_path, sigint):
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
    (tests / "e2e" / "test_e.py").write_text(waiting.format(d=tmp_path, n="never"))
    ignore = "signal.signal(signal.SIGINT, signal.SIG_IGN); " if sigint == "ignored" else ""
    script = (f"import signal, sys; {ignore}sys.path.insert(0, {str(ROOT / 'tools')!r}); import test_streams, pathlib; "
              f"sys.exit(test_streams.run_jobs(pathlib.Path({str(tests)!r}), pathlib.Path({str(tmp_path / 'logs')!r}), "
              f"at_once=2, tmp=pathlib.Path({str(tmp_path / 'tmp')!r}), "
              f"real_node_lock=pathlib.Path({str(tmp_path / 'real-node.lock')!r})))")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"{n}.started").exists() for n in ("node", "cluster")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0].decode()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=test_streams.STOP_SECONDS + 60)[0].decode()  # a job not stopping is killed
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert (tmp_path / "node.torn-down").exists() and (tmp_path / "cluster.torn-down").exists(), out
    assert not (tmp_path / "never.started").exists(), out
    assert not (tmp_path / "logs" / "durations.json").exists()

"""``--cluster`` reads through one client, and only the cluster's failures are user errors: an error the API
server answers, a kubeconfig that is not there, a server that does not answer are one line and exit 2; a bug
in this program is not dressed up as one (it raises, with its traceback)."""
from __future__ import annotations

import io

import pytest

from policylib.cli import main
from policylib.shell import kube
from tests.fakeapi import FakeAPI, paged_list
from tests.test_installed import NAMESPACES, WORKLOADS, install


def cli(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, io.StringIO(), out, err)
    return code, out.getvalue(), err.getvalue()


def test_an_error_the_api_server_answers_is_one_line_naming_it(tmp_path):
    with FakeAPI() as api:
        install(api, {}, WORKLOADS, NAMESPACES)
        api.route("GET", "/apis/apps/v1/deployments", (500, {"kind": "Status", "apiVersion": "v1", "code": 500,
                                                             "reason": "InternalError", "message": "etcd unavailable"}))
        code, out, err = cli(["plan", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k")])
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == "policylib: error: cannot read the cluster: HTTP 500 InternalError: etcd unavailable"


def test_a_server_that_does_not_answer_is_one_line(tmp_path):
    with FakeAPI() as api:
        config = api.kubeconfig(tmp_path / "k")
    code, out, err = cli(["check", "--cluster", "--kubeconfig", config])   # the server is gone: refused
    assert (code, out) == (2, "")
    assert err.startswith("policylib: error: cannot read the cluster: ") and len(err.splitlines()) == 1


def test_a_programming_error_is_not_a_user_error(tmp_path, monkeypatch):
    """The old broad ``except Exception`` turned this into "cannot read the cluster: ..." and exit 2."""
    def broken(*args, **kwargs):
        raise TypeError("snapshot() got an unexpected keyword argument 'limit'")
    monkeypatch.setattr(kube, "snapshot", broken)
    with FakeAPI() as api:
        install(api, {}, WORKLOADS, NAMESPACES)
        with pytest.raises(TypeError, match="unexpected keyword"):
            cli(["plan", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k")])


def test_one_client_reads_the_config_the_scope_and_the_objects(tmp_path, monkeypatch):
    built = []
    real = kube.api_client

    def counting(*args, **kwargs):
        built.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(kube, "api_client", counting)
    with FakeAPI() as api:
        install(api, {}, WORKLOADS, NAMESPACES)
        api.route("GET", "/api/v1/nodes", paged_list("Node", [], 500))
        code, _, err = cli(["plan", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k")])
    assert code == 0, err
    assert len(built) == 1
    assert {r["path"] for r in api.requests} >= {"/apis/apps/v1/deployments", "/api/v1/namespaces"}

"""Rule W4's read, candidate by candidate, against the harness's real kube-apiserver.

A Deployment CREATE the HPA watch has no HPA for must prove that no HPA in its namespace targets it
(or find the one the watch has not delivered yet). This measures, from one Python process, the
wall time and the client's CPU of each way of reading, alternating them read by read so the
machine's noise hits them all:

- ``generated``: the list through ``kubernetes.client.ApiClient`` (``param_serialize`` and
  ``call_api``, the generated client's request and response machinery), as the webhook did;
- ``urllib3``: the same request sent straight on the ApiClient's own urllib3 pool (the generated
  client's transport, without its request and response machinery), its answer decoded by orjson as ``raw``'s is;
- ``http.client``: the same request on a kept-alive ``http.client`` connection, parsed by orjson (what
  the webhook did before its read moved to httptools);
- ``raw``: :class:`webhook.admission.hparead.HpaRead`, what the webhook does now: the request written whole on a
  kept-alive connection, the answer parsed by httptools and orjson;
- ``raw-limit1``: ``raw`` with ``limit=1`` (proves absence only when the namespace has at most one HPA);
- ``get-by-name``: a GET of the HPA named like the Deployment (``kubectl autoscale``'s name): a 404
  proves nothing about HPAs with other names, so it can only come first, never replace the list;
- ``raw-rv0``: ``raw`` with ``resourceVersion=0`` (served from the API server's watch cache: not a
  consistent read, it can miss the HPA just as the webhook's own watch can; shown for scale).

The namespace holds ``--hpas`` HPAs (default 3) targeting other Deployments.

    .venv/bin/python bench/bench_hpa_read.py [--reads 400] [--hpas 3]
"""
from __future__ import annotations

import argparse
import http.client
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from policylib.shell import kube  # noqa: E402
from tests.e2e import harness  # noqa: E402
from webhook.admission.hparead import HpaRead  # noqa: E402

NAMESPACE = "bench-hpa-read"


def candidates(api_client: Any) -> dict[str, Callable[[], Any]]:
    api, raw = kube.Api(api_client), HpaRead(api_client)
    path = kube.HPAS.path(NAMESPACE)
    host, pool = api_client.configuration.host, api_client.rest_client.pool_manager

    def raw_query(query: str) -> Callable[[], Any]:
        def read() -> Any:
            try:
                return raw.send_path(query)()
            except kube.NotFound as e:   # get-by-name: the 404 is its answer, measured like any other
                return e
        return read

    kept: list[http.client.HTTPConnection] = []

    def through_http_client() -> Any:
        if not kept:
            kept.append(http.client.HTTPSConnection(raw.host, raw.port, context=raw.context(), timeout=1.0)
                        if raw.https else http.client.HTTPConnection(raw.host, raw.port, timeout=1.0))
        kept[0].request("GET", f"{raw.prefix}{path}?limit=500", headers=raw.headers())
        return kube.decode(kept[0].getresponse().read())

    return {
        "generated": lambda: api.request("GET", path, query=[("limit", 500)], timeout=(0.5, 1.0)),
        "urllib3": lambda: kube.decode(pool.request("GET", f"{host}{path}?limit=500", headers=raw.headers(),
                                                    retries=False, timeout=1.0).data),
        "http.client": through_http_client,
        "raw": lambda: raw(NAMESPACE),
        "raw-limit1": raw_query(f"{path}?limit=1"),
        "get-by-name": raw_query(f"{path}/web"),
        "raw-rv0": raw_query(f"{path}?limit=500&resourceVersion=0"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--reads", type=int, default=400, help="reads per candidate (default 400)")
    p.add_argument("--hpas", type=int, default=3, help="HPAs in the namespace, none for the Deployment (default 3)")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-hpa-read-"))
    (tmp / "cluster").mkdir()
    cluster = None
    try:
        cluster = harness.Cluster(tmp / "cluster")
        cluster.namespace(NAMESPACE)
        for i in range(args.hpas):
            cluster.apply({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                           "metadata": {"name": f"other-{i}", "namespace": NAMESPACE},
                           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                       "name": f"other-{i}"}, "minReplicas": 2, "maxReplicas": 5}})
        reads = candidates(kube.api_client(kubeconfig=str(cluster.kubeconfig)))
        wall: dict[str, list[float]] = {n: [] for n in reads}
        cpu: dict[str, float] = dict.fromkeys(reads, 0.0)
        for read in reads.values():   # warm every path (connections, imports)
            for _ in range(20):
                read()
        for _ in range(args.reads):
            for name, read in reads.items():
                c0, t0 = time.process_time(), time.perf_counter()
                read()
                wall[name].append(time.perf_counter() - t0)
                cpu[name] += time.process_time() - c0
        load = os.getloadavg()
        print(f"load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}; {args.reads} reads each, alternating; "
              f"{args.hpas} HPAs in the namespace\n")
        print("| read | wall p50 ms | wall p90 ms | client CPU ms/read |\n|---|---|---|---|")
        for name in reads:
            ordered = sorted(wall[name])
            print(f"| {name} | {statistics.median(ordered) * 1000:.3f} | {ordered[int(len(ordered) * 0.9)] * 1000:.3f} "
                  f"| {cpu[name] / args.reads * 1000:.3f} |")
        return 0
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the controller's work per event does not grow with the cluster.

Run by hand: ``.venv/bin/python bench/bench_controller.py``. For a cluster of 1,000 Deployments with
1,000 HPAs and one of 10,000 with 2,000, served by the tests' fake API server over HTTP: the initial
sync (list, queue every key, work the queue off), then 1,000 HPA updates delivered on a watch stream.
Each event touches another HPA. Reports time to idle, CPU seconds per event, and the number of ``plan`` calls, side by side.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import webhook.controller.reconciler as controller_module  # noqa: E402
from bench.bench_spread import realistic_deployment  # noqa: E402
from policylib import ClusterFacts, load_config, mutate  # noqa: E402
from policylib.shell import kube  # noqa: E402
from tests.controller_driver import sync, work  # noqa: E402
from tests.fakeapi import FakeAPI, paged_list, watch_stream  # noqa: E402
from webhook.controller import Controller, Options  # noqa: E402

CONFIG = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}
EVENTS = 1_000


def cluster(n_deployments: int, n_hpas: int) -> tuple[list[dict], list[dict]]:
    """Compliant Deployments (their spread written for their HPA's minimum) and the HPAs."""
    config = load_config(CONFIG)
    deployments, hpas = [], []
    for i in range(n_deployments):
        d = realistic_deployment(f"svc-{i}", replicas=1 + i % 12)
        d["metadata"].update(namespace=f"team-{i % 50}", resourceVersion=str(i + 1), uid=f"d-{i}")
        facts = ClusterFacts()
        if i < n_hpas:
            h = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                 "metadata": {"name": d["metadata"]["name"], "namespace": d["metadata"]["namespace"],
                              "resourceVersion": str(100_000 + i), "uid": f"h-{i}"},
                 "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": d["metadata"]["name"]},
                          "minReplicas": 2 + i % 5, "maxReplicas": 20}}
            hpas.append(h)
            facts = ClusterFacts.from_objects([h])
        deployments.append(mutate(d, config, facts=facts).object)
    return deployments, hpas


def hpa_updates(hpas: list[dict]) -> list[tuple[str, dict]]:
    """EVENTS changes of maxReplicas (the effective count stays: each event plans and writes nothing)."""
    events = []
    for n in range(EVENTS):
        h = hpas[n % len(hpas)]
        changed = dict(h, metadata=dict(h["metadata"], resourceVersion=str(200_000 + n)),
                       spec=dict(h["spec"], maxReplicas=21 + n))
        events.append(("MODIFIED", changed))
    return events


def measure(n_deployments: int, n_hpas: int, tmp: Path) -> dict:
    deployments, hpas = cluster(n_deployments, n_hpas)
    strip = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in deployments]
    stream = watch_stream(hpa_updates(hpas))
    plans = []
    real_plan = controller_module.plan
    controller_module.plan = lambda objs, *a, **kw: plans.append(1) or real_plan(objs, *a, **kw)
    try:
        with FakeAPI() as fake:
            fake.route("GET", "/apis/apps/v1/deployments", paged_list("Deployment", strip, 500))
            fake.route("GET", "/apis/autoscaling/v2/horizontalpodautoscalers",
                       lambda req: (200, stream) if req["query"].get("watch") else
                       paged_list("HorizontalPodAutoscaler", hpas, 500)(req))
            api = kube.Api(kube.api_client(kubeconfig=fake.kubeconfig(tmp / f"kc-{n_deployments}")))
            c = Controller(api, Options(load_config(CONFIG), identity="bench"))
            c.elector.lease_deadline = float("inf")  # leading, without a Lease round trip
            t0, cpu0 = time.perf_counter(), time.process_time()
            sync(c)
            sync_wall, sync_cpu, sync_plans = time.perf_counter() - t0, time.process_time() - cpu0, len(plans)
            [hpa_reflector] = [r for r in c.reflectors if r.res == kube.HPAS]
            hpa_reflector.resource_version = "1"
            plans.clear()
            t0, cpu0 = time.perf_counter(), time.process_time()
            hpa_reflector.watch_once()   # 1,000 events: each queues its target ...
            work(c)                    # ... and each target is planned once
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            writes = sum(s.value for m in c.metrics.writes.collect() for s in m.samples if s.name.endswith("_total"))
    finally:
        controller_module.plan = real_plan
    return {"deployments": n_deployments, "hpas": n_hpas, "sync_s": sync_wall, "sync_cpu_s": sync_cpu,
            "sync_plans": sync_plans, "events_s": wall, "cpu_per_event_us": cpu / EVENTS * 1e6,
            "event_plans": len(plans), "writes": writes}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # Each of the 1,000 events touches a different HPA in both clusters, so both plan 1,000 times.
        sizes = {1_000: 1_000, 10_000: 2_000}
        rows = {n: [] for n in sizes}
        for _ in range(3):          # alternate sizes, so both see the same machine load
            for n, h in sizes.items():
                rows[n].append(measure(n, h, Path(tmp)))
    print(f"{'cluster':>22}  {'sync to idle':>12}  {'plans':>6}  {'1,000 HPA events':>16}  {'CPU/event':>10}  {'plans':>6}")
    medians = {}
    for n, runs in rows.items():
        m = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        medians[n] = m
        print(f"{n:>7,} Deploy / {m['hpas']:>5,.0f} HPA  {m['sync_s']:>11.2f}s  {m['sync_plans']:>6.0f}  "
              f"{m['events_s']:>15.3f}s  {m['cpu_per_event_us']:>8.0f}us  {m['event_plans']:>6.0f}")
    ratio = medians[10_000]["cpu_per_event_us"] / medians[1_000]["cpu_per_event_us"]
    print(f"CPU per event, 10k vs 1k objects: {ratio:.2f}x (target <= 1.5x); writes during events: "
          f"{medians[10_000]['writes']:.0f}")


if __name__ == "__main__":
    main()

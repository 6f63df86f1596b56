"""Benchmark: ``plan`` over 10,000 Deployments and 2,000 HPAs (issue target: under 2 s).

Run by hand: ``.venv/bin/python bench/bench_plan.py``. Reports the median of
the pure planning call and of the whole ``policylib plan`` command (parsing a
JSON snapshot included), measured in this one run.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_spread import realistic_deployment  # noqa: E402
from policylib import ClusterFacts, load_config, mutate  # noqa: E402
from policylib.plan import plan, summarize  # noqa: E402

CONFIG = load_config({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "reconcileDrift": True}})


def snapshot(n_deployments: int = 10_000, n_hpas: int = 2_000) -> list[dict]:
    """A cluster: 60% compliant, 20% legacy anti-affinity, the rest with HPAs whose minimum moved."""
    objs: list[dict] = []
    for i in range(n_deployments):
        d = realistic_deployment(f"svc-{i}", replicas=1 + i % 12)
        d["metadata"]["namespace"] = f"team-{i % 50}"
        if i < n_hpas:
            hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                   "metadata": {"name": d["metadata"]["name"], "namespace": d["metadata"]["namespace"]},
                   "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                               "name": d["metadata"]["name"]},
                            "minReplicas": 2 + i % 5, "maxReplicas": 20}}
            facts = ClusterFacts.from_objects([dict(hpa, spec=dict(hpa["spec"], minReplicas=3))])
            d = mutate(d, CONFIG, facts=facts).object   # written when minReplicas was 3
            objs.append(hpa)
        elif i % 5 != 0:
            d = mutate(d, CONFIG).object                 # compliant
        objs.append(d)                                   # every 5th: legacy anti-affinity, never written
    return objs


def main() -> None:
    objs = snapshot()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        writes = plan(objs, CONFIG)
        runs.append(time.perf_counter() - t0)
    print(f"plan() over {sum(o['kind'] == 'Deployment' for o in objs):,} Deployments and "
          f"{sum(o['kind'] != 'Deployment' for o in objs):,} HPAs: median {statistics.median(runs):.2f} s "
          f"(min {min(runs):.2f}, max {max(runs):.2f}); {summarize(writes)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
        cfg = Path(tmp) / "c.json"
        cfg.write_text(json.dumps({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "reconcileDrift": True}}))
        exe = str(Path(sys.executable).parent / "policylib")
        parse = [sys.executable, "-c", "import json, sys; json.load(open(sys.argv[1]))", str(path)]
        runs, parses = [], []
        for _ in range(5):   # alternate, so both see the same machine load
            t0 = time.perf_counter()
            subprocess.run([exe, "plan", "-f", str(path), "--config", str(cfg), "-o", "json"], check=True,
                           stdout=subprocess.DEVNULL)
            runs.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run(parse, check=True)
            parses.append(time.perf_counter() - t0)
        whole, parsed = statistics.median(runs), statistics.median(parses)
        print(f"policylib plan -f snapshot.json ({path.stat().st_size / 1e6:.0f} MB), whole process: "
              f"median {whole:.2f} s; the same interpreter only parsing it with json: median {parsed:.2f} s; "
              f"ratio {whole / parsed:.1f}x (target <= 3x)")


if __name__ == "__main__":
    main()

"""Connected components: the ``components`` body (large-star / small-star) against label
propagation written by hand as a body (``examples/label-propagation``: the GraphFrames-style
min-label propagation), both through the library runner with durable checkpoints, on the same
warm local session: epochs to converge and seconds.

Graphs: a path of 10,000 nodes with shuffled ids (diameter 9,999: label propagation would need
10,000 epochs, so it is capped at ``--lp-max-epochs`` and reported as not converged), a path
of 300 nodes (where label propagation converges), and the generated 100k-edge graph of the other
benchmarks (small diameter). Run::

    .venv/bin/python -m bench.components
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples", "label-propagation"))  # the example body, uninstalled

from bench.common import DATA, graph, machine  # noqa: E402


def path_graph(n: int) -> str:
    import numpy as np
    import pandas as pd

    out = os.path.join(DATA, f"path-{n}.parquet")
    if not os.path.exists(out):
        os.makedirs(DATA, exist_ok=True)
        ids = np.random.default_rng(5).permutation(n)
        pd.DataFrame({"src": ids[:-1], "dst": ids[1:]}).to_parquet(out)
    return out


def run(spark, body: str, path: str, max_epochs: int, work: str) -> tuple[int, float, str]:
    from include.contract import JobConfig
    from spark_jobs.runner import IterationRunner

    scratch = tempfile.mkdtemp(dir=work)
    config = JobConfig(job_id="cc", body=body, input=path, checkpoint_root=os.path.join(scratch, "store"),
                       output_path=os.path.join(scratch, "out"), max_epochs=max_epochs, tolerance=0.5,
                       num_partitions=2)
    started = time.perf_counter()
    result = IterationRunner(config, spark).run()
    seconds = time.perf_counter() - started
    shutil.rmtree(scratch, ignore_errors=True)
    return len(result.epochs_computed), seconds, result.decisions[-1].reason or ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lp-max-epochs", type=int, default=30)
    args = parser.parse_args()
    from spark_jobs.session import get_spark

    spark = get_spark("bench-components")
    work = tempfile.mkdtemp(prefix="bench-components-")
    print(machine())
    inputs = [("path of 300 nodes", path_graph(300)), ("path of 10,000 nodes", path_graph(10_000)),
              ("generated graph, 100k edges", graph(100_000)[0])]
    run(spark, "components", inputs[0][1], 60, work)  # warm-up
    rows = []
    for label, path in inputs:
        ours = run(spark, "components", path, 60, work)
        lp = run(spark, "label_propagation:LabelPropagation", path, args.lp_max_epochs if "10,000" in label else 400,
                 work)
        for name, (epochs, seconds, reason) in (("components", ours), ("label propagation", lp)):
            print(f"  {label}: {name}: {epochs} epochs, {seconds:.1f} s ({reason})", flush=True)
        rows.append((label, ours, lp))
    shutil.rmtree(work, ignore_errors=True)
    print("\n| graph | components: epochs | s | s/epoch | label propagation: epochs | s | s/epoch |")
    print("|---|---|---|---|---|---|---|")
    for label, (e1, s1, r1), (e2, s2, r2) in rows:
        done = "" if r2.startswith("converged") else " (not converged)"
        print(f"| {label} | {e1} | {s1:.1f} | {s1 / e1:.2f} | {e2}{done} | {s2:.1f} | {s2 / e2:.2f} |")


if __name__ == "__main__":
    main()

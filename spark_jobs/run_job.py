"""Run a whole job (a batch of epochs) from the command line with the library runner.

    python -m spark_jobs.run_job --job-id pr --body pagerank --input edges.csv \\
        --checkpoint-root .local/store --output-path .local/out --max-epochs 30 --tolerance 1e-8

Run it again after any failure: it resumes from the latest committed checkpoint. The last
line printed is a JSON summary of the run.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from include.contract import InputSpec, JobConfig
from include.errors import IterationError
from include.process import SPARK_REMOTE


def _count_or_none(value: str) -> int | None:
    """An integer, or ``none`` (no limit)."""
    if value.strip().lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or none, got {value!r}") from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="spark_jobs.run_job", description=__doc__.split("\n\n")[0])
    p.add_argument("--job-id", required=True)
    p.add_argument("--body", required=True, help="pagerank, kmeans, or package.module:Class")
    p.add_argument("--input", required=True, help="local path or s3://bucket/key")
    p.add_argument("--input-format", choices=["csv", "parquet", "json"], default=None)
    p.add_argument("--checkpoint-root", required=True, help="local directory or s3://bucket/prefix")
    p.add_argument("--output-path", default=None)
    p.add_argument("--output-format", default="parquet", choices=["parquet", "delta"])
    p.add_argument("--max-epochs", type=_count_or_none, default=50, help="the epoch limit; none: no limit")
    p.add_argument("--tolerance", type=float, default=1e-6)
    p.add_argument("--num-partitions", type=int, default=None,
                   help="partitions of the feedback datasets; default: from the input's size (include.contract.sizing)")
    p.add_argument("--retain-last", type=int, default=3)
    p.add_argument("--retain-batches", type=_count_or_none, default=None,
                   help="batches whose final checkpoint is kept (default: every batch's)")
    p.add_argument("--retain-history", type=_count_or_none, default=None,
                   help="retired checkpoints whose summary is kept (default: all)")
    p.add_argument("--full-checkpoint-every", type=int, default=10,
                   help="epochs that are multiples of this write full checkpoints; the others reference the "
                        "partitions unchanged since the previous checkpoint (1: every checkpoint full)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=JSON",
                   help="body parameter, value as JSON (repeatable): --param damping=0.85 --param k=3")
    p.add_argument("--max-epochs-in-batch", type=int, default=None)
    p.add_argument("--batch-id", default=None)
    p.add_argument("--remote", default=SPARK_REMOTE.get(), metavar="sc://HOST:PORT",
                   help="run the epochs on a Spark Connect server (default: $SPARK_REMOTE; none: a local "
                        "Spark driver in this process)")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint (MinIO, moto); default from the environment")
    p.add_argument("--checks", default=None, metavar="FILE",
                   help="data checks (JSON: {\"expectations\": [...]}), over the body's; see docs/data-checks.md")
    p.add_argument("--no-checks", action="store_true", help="turn the data checks off")
    p.add_argument("--on-damaged-checkpoint", choices=["fail", "previous"], default="fail",
                   help="a damaged latest checkpoint: fail (default), or fall back to the newest intact one")
    p.add_argument("--rewind-to", type=int, default=None, metavar="EPOCH",
                   help="recompute the job from this epoch as a new generation (docs/library.md)")
    p.add_argument("--fork-from", default=None, metavar="JOB[:EPOCH]",
                   help="start this new job from job JOB's committed checkpoint of epoch EPOCH (default: its "
                        "newest kept epoch), in the same checkpoint root, with this run's params (docs/library.md)")
    p.add_argument("--on-input-change", choices=["refuse", "restart"], default="refuse",
                   help="the input is no longer what the job pinned at its first epoch: refuse (default: fail "
                        "naming the file), or restart (a new generation from epoch 0 on the new input)")
    p.add_argument("--verify-epoch", type=int, default=None, metavar="EPOCH",
                   help="the determinism audit: recompute this epoch from the checkpoint before it in a scratch "
                        "attempt that never commits, compare every variable's bytes with the committed checkpoint, "
                        "print 'verified: epoch K identical' or what differs (exit 1); the store is only read")
    p.add_argument("--retire", default=None, metavar="GENERATION",
                   help="delete the log of an older generation of the job (e.g. JOB after a rewind made JOB.r1) "
                        "instead of running it; prints what was deleted (docs/library.md)")
    p.add_argument("--dag-id", default=None, help="with --retire: the DAG that owns the job (a job a DAG runs)")
    p.add_argument("--take-over", action="store_true",
                   help="continue a job that belongs to another owner (a DAG, another body, input or output path) "
                        "and make it this run's")
    p.add_argument("--lease-wait", type=float, default=0.0, metavar="SECONDS",
                   help="wait up to SECONDS for another run of the job to end (default: fail at once naming it)")
    p.add_argument("--wait-for-input", type=float, default=None, metavar="SECONDS",
                   help="input arriving while the job runs (body sgd): wait up to SECONDS before each epoch")
    p.add_argument("--no-overlap-commits", action="store_true",
                   help="commit each epoch before the next is planned (default: an epoch's checks and commit run "
                        "beside the next epoch, which never commits before it)")
    args = p.parse_args(argv)
    if args.retire is not None and args.rewind_to is not None:
        p.error("--retire deletes an older generation; --rewind-to starts a new one: one at a time")
    if args.verify_epoch is not None and (args.retire is not None or args.rewind_to is not None):
        p.error("--verify-epoch only reads the job: not with --retire or --rewind-to")
    if args.fork_from is not None and (args.rewind_to is not None or args.retire is not None):
        p.error("--fork-from starts a new job: not with --rewind-to or --retire")
    if args.dag_id is not None and args.retire is None:
        p.error("--dag-id is only for --retire (a run outside Airflow has no DAG)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from include.process import skip_exit_collection

    skip_exit_collection()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    params = {}
    for item in args.param:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"--param {item!r}: expected NAME=JSON", file=sys.stderr)
            return 2
        try:
            params[name] = json.loads(value)
        except json.JSONDecodeError:
            params[name] = value
    spark = None
    if args.remote:
        from spark_jobs.session import connect_session

        try:
            spark = connect_session(args.remote)
        except ValueError as e:
            print(f"--remote: {e}", file=sys.stderr)
            return 2
    try:
        from include.checks import load_checks_file

        checks = load_checks_file(args.checks) if args.checks else None
        if args.no_checks:
            checks = {**(checks or {}), "enabled": False}
        config = JobConfig(
            job_id=args.job_id, body=args.body, input=InputSpec(args.input, args.input_format),
            checkpoint_root=args.checkpoint_root, output_path=args.output_path, output_format=args.output_format,
            body_params=params,
            max_epochs=args.max_epochs, tolerance=args.tolerance, num_partitions=args.num_partitions,
            retain_last=args.retain_last, retain_batches=args.retain_batches, retain_history=args.retain_history,
            full_checkpoint_every=args.full_checkpoint_every,
            checks=checks, on_damaged_checkpoint=args.on_damaged_checkpoint, fork_from=args.fork_from,
        )
        from spark_jobs.runner import IterationRunner

        options = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}
        runner = IterationRunner(config, spark, store_options=options, wait_for_input=args.wait_for_input,
                                 take_over=args.take_over, lease_wait=args.lease_wait, rewind_to=args.rewind_to,
                                 on_input_change=args.on_input_change, overlap_commits=not args.no_overlap_commits)
        if args.verify_epoch is not None:
            verification = runner.verify_epoch(args.verify_epoch)
            print(verification.describe())
            return 0 if verification.identical else 1
        if args.retire is not None:
            print(json.dumps({"job_id": args.job_id, "retired": args.retire, **runner.retire(args.retire, dag_id=args.dag_id)}))
            return 0
        result = runner.run(batch_id=args.batch_id, max_epochs_in_batch=args.max_epochs_in_batch)
    except IterationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        from spark_jobs.session import lost_driver_exit_code

        code = None if args.remote else lost_driver_exit_code(e)
        if code is None:
            raise
        print(f"error: job {args.job_id}: the Spark driver (JVM) of this run exited with code {code}: its last "
              f"lines above say why ('Terminating due to java.lang.OutOfMemoryError': it ran out of heap; "
              f"SPARK_DRIVER_MEMORY sets it). Every committed checkpoint is kept: run again to resume.",
              file=sys.stderr)
        return 1
    summary = {
        "job_id": result.job_id,
        "status": result.status.value,
        "checkpoint_id": result.checkpoint_id,
        "restored_from": result.restored_from,
        "epochs_computed": result.epochs_computed,
        "epochs_adopted": result.epochs_adopted,
        "published": result.published,
        "termination": result.decisions[-1].reason if result.decisions else None,
    }
    if runner.job.forked_from:
        summary["forked_from"] = runner.job.forked_from
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

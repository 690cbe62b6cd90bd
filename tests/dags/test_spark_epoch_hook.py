"""Connect mode: a retry reaches the Spark job its earlier try started and stops it; the
attempts of a batch share its session, and one whose batch session was closed runs in a
session of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = textwrap.dedent("""
    import sys, threading, time, types
    sys.path.insert(0, "plugins")
    from pyspark.sql import functions as F
    from iterations.hooks.spark_epoch import SparkEpochHook, attempt_session_id, attempt_tag, batch_session_id

    def plan(attempt_id, batch_id="manual__1"):
        return types.SimpleNamespace(job_id="j", batch_id=batch_id, attempt_id=attempt_id,
                                     store={"kind": "local", "root": "/tmp/x"})

    # "first try": runs a long Spark job in its batch's session, tagged with the attempt id
    first = SparkEpochHook("connect")
    url = first.connect_url()
    spark, session_id = first._attempt_session(url, plan("a3-0123456789ab"))
    print("BATCH SESSION", session_id == batch_session_id(plan("a3-0123456789ab")))
    print("SAME BATCH SAME SESSION", batch_session_id(plan("a4-1")) == session_id,
          batch_session_id(plan("a4-1", "manual__2")) != session_id)
    outcome = {}

    def slow(x):
        time.sleep(120)
        return x

    def run():
        spark.addTag(attempt_tag("a3-0123456789ab"))  # tags are per thread, as in the hook
        try:
            spark.range(2).repartition(2).select(F.udf(slow, "long")("id")).collect()
            outcome["result"] = "finished"
        except Exception as e:
            outcome["result"] = type(e).__name__ + ": " + str(e)[:200]

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(8)
    # "retry", with its own client, as a new process would have
    retry = SparkEpochHook("connect")
    started = time.monotonic()
    interrupted = retry.interrupt(plan("a3-0123456789ab"))
    t.join(60)
    print("INTERRUPTED", len(interrupted))
    print("RESULT", outcome.get("result"))
    print("SECONDS", round(time.monotonic() - started, 1))
    print("NOTHING", SparkEpochHook("connect").interrupt(plan("a9-ffffffffffff")))

    # the server closes an idle session for good: the next attempt of the batch gets its own
    spark.client.release_session()
    other, other_id = SparkEpochHook("connect")._attempt_session(url, plan("a5-0123456789ab"))
    print("FALLBACK", other_id == attempt_session_id("a5-0123456789ab"), other.range(3).count())
""")


def test_retry_interrupts_the_earlier_attempts_spark_job(airflow_env):
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=airflow_env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 0, (out + done.stderr)[-4000:]
    assert "INTERRUPTED 1" in out, out
    result = out.split("RESULT ", 1)[1].splitlines()[0]
    assert result != "finished" and "None" != result, result
    assert float(out.split("SECONDS ", 1)[1].splitlines()[0]) < 60, "stopped, not waited for"
    assert "NOTHING []" in out
    assert "BATCH SESSION True" in out and "SAME BATCH SAME SESSION True True" in out, out
    assert "FALLBACK True 3" in out, out

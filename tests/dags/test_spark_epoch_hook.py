"""Connect mode: a retry reaches the Spark job its earlier try started and stops it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = textwrap.dedent("""
    import sys, threading, time
    sys.path.insert(0, "plugins")
    from pyspark.sql import functions as F
    from iterations.hooks.spark_epoch import SparkEpochHook, attempt_tag

    # "first try": runs a long Spark job in the attempt's session, tagged with the attempt id
    first = SparkEpochHook("connect")
    spark = first._session("a3-0123456789ab")
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
    interrupted = retry.interrupt("a3-0123456789ab")
    t.join(60)
    print("INTERRUPTED", len(interrupted))
    print("RESULT", outcome.get("result"))
    print("SECONDS", round(time.monotonic() - started, 1))
    print("NOTHING", SparkEpochHook("connect").interrupt("a9-ffffffffffff"))
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

"""The embedded Spark Connect server's idle Python daemons (spark_jobs.connect_server.
reap_idle_daemons), on a process tree shaped like the server's: a parent whose command line
names the server's port, with ``python -m pyspark.daemon`` children (a stand-in module, on a
path of its own; pyspark 4.3 names the worker module after it), one with a worker of its own,
one without, and a child that is not a daemon.
The real server's restart of a stopped daemon: tests/dags/test_run_job_remote.py."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from spark_jobs import connect_server

# the stand-in daemon: with FORK_WORKER set it forks a worker that sleeps; then it sleeps
DAEMON = textwrap.dedent("""
    import os, time
    if os.environ.get("FORK_WORKER") and os.fork() == 0:
        time.sleep(600)
        os._exit(0)
    time.sleep(600)
""")

# the stand-in server: named by its port like the real one's JVM; starts its children, then
# reaps those that end (as the JVM does)
SERVER = textwrap.dedent("""
    import os, subprocess, sys, time
    env = dict(os.environ, PYTHONPATH=sys.argv[1])
    subprocess.Popen([sys.executable, "-m", "pyspark.daemon", "pyspark.worker"], env=env)
    subprocess.Popen([sys.executable, "-m", "pyspark.daemon"], env=dict(env, FORK_WORKER="1"))
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(600)
""")


@pytest.fixture
def server(tmp_path, monkeypatch):
    fake = tmp_path / "fake" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "daemon.py").write_text(DAEMON)
    port = 40_000 + os.getpid() % 20_000
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(tmp_path / "fake"),
                             f"spark.connect.grpc.binding.port={port}"])
    state = tmp_path / "state"
    state.mkdir()
    (state / "spark-me-org.apache.spark.sql.connect.service.SparkConnectServer-1.pid").write_text(f"{proc.pid}\n")
    monkeypatch.setattr(connect_server, "STATE_DIR", str(state))
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # three children, the second daemon with its worker
        kids = parent.children()
        if len(kids) == 3 and any(k.children() for k in kids):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the stand-in server's children did not start: {parent.children(recursive=True)}")
    try:
        yield port, parent
    finally:
        for p in parent.children(recursive=True) + [parent]:
            try:
                p.kill()
            except psutil.Error:
                pass
        proc.wait(timeout=30)


def _kinds(parent: psutil.Process) -> dict[int, str]:
    kinds = {}
    for kid in parent.children():
        daemon = connect_server.is_python_daemon(kid.cmdline())
        kinds[kid.pid] = ("daemon with a worker" if kid.children() else "idle daemon") if daemon else "other"
    return kinds


def test_only_idle_daemons_older_than_the_limit_are_stopped(server, caplog):
    port, parent = server
    kinds = _kinds(parent)
    assert sorted(kinds.values()) == ["daemon with a worker", "idle daemon", "other"]

    assert connect_server.reap_idle_daemons(port, idle=3600) == [], "younger than the limit: kept"
    assert connect_server.reap_idle_daemons(port + 1, idle=0) == [], "another port's server: not ours"

    with caplog.at_level(logging.INFO, logger="spark_jobs.connect_server"):
        reaped = connect_server.reap_idle_daemons(port, idle=0)
    assert [kinds[pid] for pid in reaped] == ["idle daemon"]
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(pid) for pid in reaped) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(_kinds(parent).values()) == ["daemon with a worker", "other"], "the others still run"
    assert f"stopped 1 idle Python daemon(s) of the Spark Connect server on port {port} (pids {reaped[0]})" \
        in caplog.text


def test_what_a_python_daemon_is():
    python = "/venv/bin/python"
    assert connect_server.is_python_daemon([python, "-m", "pyspark.daemon"])
    assert connect_server.is_python_daemon([python, "-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source"])
    assert not connect_server.is_python_daemon([python, "-m", "pyspark.worker"])
    assert not connect_server.is_python_daemon([python, "-c", "pyspark.daemon"])
    assert not connect_server.is_python_daemon([python, "pyspark.daemon", "-m"])


def test_the_server_is_found_only_by_its_own_pid_file(tmp_path, monkeypatch):
    monkeypatch.setattr(connect_server, "STATE_DIR", str(tmp_path))
    assert connect_server.server_process(15002) is None, "no pid file"
    pid_file = tmp_path / "spark-me-org.apache.spark.sql.connect.service.SparkConnectServer-1.pid"
    for content in ("", "not a pid", "999999999", str(os.getpid())):  # the last: a process, not the server
        pid_file.write_text(content)
        assert connect_server.server_process(15002) is None, content
        assert connect_server.reap_idle_daemons(15002, idle=0) == []

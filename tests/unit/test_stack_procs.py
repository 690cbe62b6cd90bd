"""The native stack's process handling and command line, without starting a service
(tests/dags/test_stack.py runs the stack itself)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from stack.__main__ import main
from stack.procs import Session, session_members, spawn, stop_session
from stack.services import Stack
from tests.conftest import ROOT


def test_stop_session_reaches_a_process_that_left_the_group(tmp_path):
    """A service's children may lead process groups of their own (PySpark's daemon does, and
    Airflow's task processes): stopping by session still reaches them, and a child that ignores
    SIGTERM is killed after the grace period."""
    script = ("import os, signal, subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import os, signal, time; os.setpgid(0, 0); "
              "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'])\n"
              "time.sleep(300)\n")
    proc = spawn([sys.executable, "-c", script], dict(os.environ), str(tmp_path / "log"))
    deadline = time.monotonic() + 20
    while len({os.getpgid(pid) for pid in session_members(proc.pid)}) < 2:  # the child's setpgid done
        assert time.monotonic() < deadline, "the child did not start, or lead a group of its own"
        time.sleep(0.05)
    killed = stop_session(proc.pid, grace=1)
    assert session_members(proc.pid) == []
    assert len(killed) == 1 and killed[0] != proc.pid, "only the child ignoring SIGTERM needed SIGKILL"


def test_the_command_line_refuses_bad_settings_naming_them(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["start", "--home", str(tmp_path), "--setting", "no-equals-sign"])
    assert "'no-equals-sign'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["stop", "--home", str(tmp_path), "--setting", "A=1"])
    assert "go with start only" in capsys.readouterr().err
    for bad, named in ((["--spark-conf", "executor.memory=3g"], "'executor.memory=3g'"),
                       (["--spark-conf", "spark.executor.memory"], "'spark.executor.memory'"),
                       (["--spark-worker-memory", "lots"], "got 'lots'")):
        with pytest.raises(SystemExit):
            main(["start", "--home", str(tmp_path), *bad])
        assert named in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["stop", "--home", str(tmp_path), "--spark-conf", "spark.executor.memory=3g"])
    assert "go with start only" in capsys.readouterr().err


def test_status_and_stop_of_a_folder_with_no_stack(tmp_path):
    done = subprocess.run([sys.executable, "-m", "stack", "status", "--home", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and f"no stack recorded in {tmp_path}" in done.stdout, done.stdout + done.stderr
    assert main(["stop", "--home", str(tmp_path)]) == 0


def test_a_session_id_given_out_again_or_from_another_boot_is_not_signalled(tmp_path):
    """A recorded session whose id now leads another process (its start time differs), comes
    from another boot, or was recorded without a start time (an older stack.json) is stopped
    for ``status`` and is never signalled by ``stop`` or ``kill``: the live process stays."""
    proc = spawn([sys.executable, "-c", "import time; time.sleep(300)"], dict(os.environ), str(tmp_path / "log"))
    try:
        real = Session.of(proc.pid)
        assert real.ours() and real.members() == [proc.pid]
        for stale in (Session(proc.pid, real.start - 1, real.boot), Session(proc.pid, real.start, "another-boot"),
                      Session.from_json(proc.pid)):
            assert not stale.ours() and stale.members() == [] and stale.stop(grace=1) == []
            stack = Stack(str(tmp_path), state={"sessions": {"airflow-scheduler": stale.to_json()}})
            assert stack.running() == {"airflow-scheduler": False}
            assert stack.kill("airflow-scheduler") == [] and stack.stop() == {}
            assert proc.poll() is None, f"{stale} signalled a process that is not the stack's"
        assert Session.from_json(real.to_json()) == real
        assert real.stop(grace=5) == [] and proc.wait(timeout=10) is not None
        assert real.ours() and real.members() == [], "a session whose processes are all gone is stopped"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_an_airflow_component_that_exits_is_started_again_until_its_session_is_stopped(tmp_path):
    """stack.supervise, the compose file's ``restart: always``: a command that exits is started
    again (its log says so); stopping the session stops the supervisor and the command for good;
    a command that cannot start gives up after a few quick exits, with the command's status."""
    runs = tmp_path / "runs"
    script = (f"import os, sys, time\nwith open({str(runs)!r}, 'a') as f: f.write('run\\n')\n"
              f"if len(open({str(runs)!r}).read().split()) == 1: sys.exit(5)\ntime.sleep(300)\n")
    proc = spawn([sys.executable, "-m", "stack.supervise", "--", sys.executable, "-c", script], dict(os.environ),
                 str(tmp_path / "log"))
    deadline = time.monotonic() + 60
    while not (runs.exists() and len(runs.read_text().split()) == 2 and len(session_members(proc.pid)) == 2):
        assert time.monotonic() < deadline, (tmp_path / "log").read_text()
        time.sleep(0.1)
    assert "exited with status 5" in (tmp_path / "log").read_text()
    assert stop_session(proc.pid, grace=20) == [] and proc.wait(timeout=10) == 0
    time.sleep(1.5)
    assert len(runs.read_text().split()) == 2, "not started again once stopped"

    done = subprocess.run([sys.executable, "-m", "stack.supervise", "--give-up", "2", "--", sys.executable, "-c",
                           "import sys; sys.exit(3)"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "2 times in a row" in done.stdout, done.stdout + done.stderr

"""A real Airflow for tests: ``airflow standalone`` (api-server, scheduler, dag-processor,
triggerer; the project's PreloadingLocalExecutor, as in docker-compose.yaml, on SQLite) in its
own process group, driven through the REST API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from tests import warm_airflow
from tests.conftest import ROOT, free_port

AIRFLOW = os.path.join(os.path.dirname(sys.executable), "airflow")


class AirflowApi:
    """A client of a running Airflow: its REST API as the admin, and its CLI with ``env``."""

    url: str
    env: dict[str, str]
    home: str
    log_path: str
    _token: str | None = None

    def log_tail(self, n: int = 4000) -> str:
        try:
            return open(self.log_path).read()[-n:]
        except OSError:
            return ""

    # --- REST API ---------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if not path.startswith("/auth/"):
            headers["Authorization"] = f"Bearer {self.token()}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def token(self) -> str:
        if self._token is None:
            self._token = self._request("GET", "/auth/token")["access_token"]
        return self._token

    def get(self, path: str) -> Any:
        return self._request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self._request("POST", path, body)

    def unpause(self, dag_id: str) -> None:
        self._request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any], logical_date: str | None = None) -> str:
        run = self.post(f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": logical_date, "conf": conf})
        return run["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.request.quote(run_id, safe='')}")["state"]

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        got = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.request.quote(run_id, safe='')}/taskInstances?limit=1000")
        return {ti["task_id"]: ti for ti in got["task_instances"]}

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=run_after")["dag_runs"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        raise TimeoutError(f"run {run_id} of {dag_id} not done in {timeout}s: "
                           f"{ {k: v['state'] for k, v in self.task_instances(dag_id, run_id).items()} }")

    def cli(self, *args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """``airflow <args>`` against this server's home: forked from a warm process when one
        serves it (tests/warm_airflow.py), else a new process."""
        return warm_airflow.run(env or self.env, *args, cwd=ROOT, timeout=timeout)



class AirflowServer(AirflowApi):
    def __init__(self, home: str, connect_dir: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.home = home
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": home,
            "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(ROOT, "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(ROOT, "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__EXECUTOR": "iterations.executors.PreloadingLocalExecutor",  # as docker-compose.yaml
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.25",  # as docker-compose.yaml
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # tests unpause what they run
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API_AUTH__JWT_SECRET": "iterations-test-secret",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # a killed worker is noticed in seconds, not the default 5 minutes
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "3",
            # a task marked failed or success in the UI is stopped at its next heartbeat
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
            "PYTHONPATH": ROOT,
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),  # standalone runs `airflow`
            "PYSPARK_PYTHON": sys.executable,
            "ITERATIONS_LOCAL_DIR": os.path.join(home, "local"),  # default params never touch the checkout
            "ITERATIONS_SPARK_CONNECT_PORT": str(free_port()),
            "ITERATIONS_SPARK_CONNECT_DIR": connect_dir,
        }
        self.env.pop("ITERATIONS_DRIVER_PID", None)
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(home, "standalone.log")
        self._token: str | None = None

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 240) -> "AirflowServer":
        subprocess.run([AIRFLOW, "db", "migrate"], env=self.env, check=True, capture_output=True, timeout=300)
        self.proc = subprocess.Popen([AIRFLOW, "standalone"], env=self.env, cwd=ROOT, start_new_session=True,
                                     stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"airflow standalone exited {self.proc.returncode}: {self.log_tail()}")
            try:
                self.get("/api/v2/dags/iterate_pagerank")
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(2)
        raise TimeoutError(f"Airflow did not come up with the DAGs parsed in {timeout}s: {self.log_tail()}")

    def stop(self) -> None:
        """Stop every process of the group (standalone's components and their workers)."""
        if self.proc is not None:
            pgid = self.proc.pid
            for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline:
                    self.proc.poll()  # reap standalone itself
                    try:
                        os.killpg(pgid, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.5)
        subprocess.run([sys.executable, "-m", "spark_jobs.connect_server", "stop"], env=self.env, cwd=ROOT,
                       capture_output=True, timeout=120)


class StackApi(AirflowApi):
    """A client of the native production stack's Airflow (stack.services.Stack: PostgreSQL,
    Celery workers), logged in as its admin."""

    def __init__(self, stack):
        self.stack, self.url, self.env = stack, stack.url, stack.airflow_env()
        self.home = self.env["AIRFLOW_HOME"]
        self.log_path = stack.log("airflow-scheduler")
        self.scheduler_session = stack.sessions()["airflow-scheduler"].sid

    def token(self) -> str:
        if self._token is None:
            self._token = self.stack.token()
        return self._token

    def stop(self) -> None:
        self.stack.stop()


def processes_titled(fragment: str) -> list[int]:
    """Pids whose command line (setproctitle'd by Airflow) contains ``fragment``."""
    done = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True)
    pids = []
    for line in done.stdout.splitlines():
        pid, _, args = line.strip().partition(" ")
        if fragment in args and int(pid) != os.getpid():
            pids.append(int(pid))
    return pids


class ApiServer(AirflowServer):
    """Only ``airflow api-server`` (the REST API, the UI and the plugins' apps; no scheduler), with
    SimpleAuthManager users that log in with a password: ``admin`` and ``viewer`` (the role)."""

    USERS = {"admin": "admin", "viewer": "viewer"}
    # Users granted single DAGs, as a deployment's FAB or Keycloak roles would
    # (tests.dags.dag_auth.PerDagAuthManager, which is SimpleAuthManager for every other user):
    # ``reader_a`` may read DAG ``dag_a`` only, ``reader_pr`` DAG ``iterate_pagerank`` only.
    DAG_GRANTS = {"reader_a": ["dag_a"], "reader_pr": ["iterate_pagerank"]}
    USERS = {**USERS, **{user: "viewer" for user in DAG_GRANTS}}

    def __init__(self, home: str, connect_dir: str):
        super().__init__(home, connect_dir)
        self.passwords = {user: f"{user}-password" for user in self.USERS}
        passwords_file = os.path.join(home, "passwords.json")
        with open(passwords_file, "w") as f:
            json.dump(self.passwords, f)
        self.env.update({
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in self.USERS.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": passwords_file,
        })
        self.env.update({
            "AIRFLOW__CORE__AUTH_MANAGER": "tests.dags.dag_auth.PerDagAuthManager",
            "ITERATIONS_TEST_DAG_GRANTS": json.dumps(self.DAG_GRANTS),
        })

    def start(self, timeout: float = 180) -> "ApiServer":
        subprocess.run([AIRFLOW, "db", "migrate"], env=self.env, check=True, capture_output=True, timeout=300)
        self.proc = subprocess.Popen([AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(self.port),
                                      "--workers", "1"], env=self.env, cwd=ROOT, start_new_session=True,
                                     stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"airflow api-server exited {self.proc.returncode}: {self.log_tail()}")
            try:
                self.token()
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(1)
        raise TimeoutError(f"the Airflow API server did not come up in {timeout}s: {self.log_tail()}")

    def login(self, user: str) -> str:
        """A JWT for ``user``, from its password."""
        body = json.dumps({"username": user, "password": self.passwords[user]}).encode()
        req = urllib.request.Request(self.url + "/auth/token", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["access_token"]

    def token(self) -> str:
        if self._token is None:
            self._token = self.login("admin")
        return self._token

    def fetch(self, path: str, token: str | None = None, cookie: str | None = None) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET, authenticated by a Bearer token or the UI's
        session cookie, or neither; an HTTP error status is returned, not raised, and a redirect
        is not followed (its body is its Location)."""
        headers = {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if cookie:
            headers["Cookie"] = f"_token={cookie}"
        req = urllib.request.Request(self.url + path, headers=headers)
        try:
            with urllib.request.build_opener(_NoRedirect).open(req, timeout=60) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as e:
            if 300 <= e.code < 400:
                return e.code, "", e.headers.get("Location", "").encode()
            return e.code, e.headers.get("Content-Type", ""), e.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None

"""The services of docker-compose.yaml, started natively on loopback under one folder (by
default ``.local/stack/`` of the checkout): PostgreSQL (a throwaway cluster made with
``initdb``), Redis, ``moto_server`` standing in for MinIO (with the compose file's buckets), a
Spark master with two workers and a Spark Connect server, and Airflow on PostgreSQL with the
CeleryExecutor (api-server, scheduler, dag-processor, triggerer, and two Celery workers).

Each Celery worker plays a machine of its own: its own host name (what the task instances
record), its own temporary folder, nothing forked from the scheduler. They share only what
workers of a real deployment share: the database, the broker, the Spark cluster, the object
store, the DAG files (read-only), and two folders a deployment shares as volumes (or replaces):
the task logs' (or remote logging) and ``ITERATIONS_LOCAL_DIR``, where the DAGs' default store
and outputs are (or the runs name S3 paths).

The state of a running stack (each service's session id, the ports, where the secrets are) is
``stack.json`` in the folder; ``stop`` works from it alone, so it may run in another process
than ``start`` did."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

from stack.procs import ROOT, Session, free_port, listening, spawn, tail, wait_until
from stack.spark import StandaloneCluster

BUCKETS = ("iterations-checkpoints", "iterations-outputs", "iterations-inputs")  # as minio-init
WORKERS = ("worker-1", "worker-2")  # the Celery workers' host names
ADMIN = "admin"
#: the user who approves the reviewed DAGs' publications (dags/iterate_pagerank_reviewed.py)
REVIEWER = "reviewer"
S3_KEY_ID = "stack-key-id"  # moto accepts any credentials; the stack's components get these

# The order ``stop`` goes in: clients of a service before the service.
STOP_ORDER = ("airflow-worker-1", "airflow-worker-2", "airflow-triggerer", "airflow-scheduler",
              "airflow-dag-processor", "airflow-api-server", "spark-connect", "spark-worker-1", "spark-worker-2",
              "spark-master", "moto", "redis", "postgres")


class StackError(RuntimeError):
    pass


def _bin(name: str) -> str:
    """A command of the project's virtual environment (``airflow``, ``moto_server``)."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    found = here if os.path.exists(here) else shutil.which(name)
    if not found:
        raise StackError(f"{name} not found next to {sys.executable} nor on PATH: run ./run.sh setup")
    return found


def _postgres_bin(name: str) -> str:
    """A PostgreSQL server program (initdb, postgres): Debian keeps them out of PATH."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: int(v) if v.isdigit() else 0) \
        if os.path.isdir("/usr/lib/postgresql") else []
    for version in reversed(versions):
        candidate = os.path.join("/usr/lib/postgresql", version, "bin", name)
        if os.path.exists(candidate):
            return candidate
    raise StackError(f"PostgreSQL's {name} not found: install the postgresql package (./run.sh stack does)")


def _postgres_user() -> str | None:
    """Whom PostgreSQL runs as: it refuses root, so as root the postgres user; else this one."""
    return "postgres" if os.geteuid() == 0 else None


def _postgres_env() -> dict[str, str]:
    return {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}


@dataclass
class Stack:
    home: str
    # for start: more settings for every Airflow component, and for the Spark workers (and executors)
    extra_env: dict[str, str] = field(default_factory=dict)
    spark_worker_env: dict[str, str] = field(default_factory=dict)
    # for start: the Spark workers' memory, and more --conf of the Spark Connect server (its
    # executors' memory for a large job, say: spark.executor.memory=3g)
    spark_worker_memory: str = "2g"
    spark_conf: dict[str, str] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    cluster: StandaloneCluster | None = None
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)  # what this process started

    def __post_init__(self) -> None:
        self.home = os.path.abspath(self.home)
        self.state_path = os.path.join(self.home, "stack.json")
        if not self.state and os.path.exists(self.state_path):
            with open(self.state_path) as f:
                self.state = json.load(f)

    # --- state --------------------------------------------------------------------------------

    def _save(self) -> None:
        tmp = self.state_path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.state, f, indent=1)
        os.replace(tmp, self.state_path)

    def _record(self, name: str, sid: int) -> None:
        self.state.setdefault("sessions", {})[name] = Session.of(sid).to_json()
        self._save()

    def sessions(self) -> dict[str, Session]:
        """Each recorded service's session."""
        return {name: Session.from_json(v) for name, v in self.state.get("sessions", {}).items()}

    def running(self) -> dict[str, bool]:
        """Each recorded service, and whether any process of its session is alive (a session id
        that the kernel has given out again since, or that comes from another boot, is stopped)."""
        return {name: bool(session.members()) for name, session in self.sessions().items()}

    @property
    def ports(self) -> dict[str, int]:
        return self.state["ports"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['airflow']}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['moto']}"

    def admin_password(self) -> str:
        return self.state["secrets"]["admin_password"]

    def log(self, name: str) -> str:
        return os.path.join(self.home, "logs", f"{name}.log")

    # --- environment ----------------------------------------------------------------------------

    def airflow_env(self, worker: str | None = None) -> dict[str, str]:
        """The environment of an Airflow component (of Celery worker ``worker`` when given), and
        of a client of the stack (``airflow`` commands, tests)."""
        s, p = self.state["secrets"], self.ports
        db = f"airflow:{s['postgres_password']}@127.0.0.1:{p['postgres']}/airflow"
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("AIRFLOW", "AWS_", "ITERATIONS_", "SPARK_", "PYSPARK_"))}
        airflow_home = os.path.join(self.home, "airflow")
        env = {
            **base,
            "AIRFLOW_HOME": airflow_home,
            "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(ROOT, "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": os.path.join(ROOT, "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__CALLSITE_PARAMETERS": "",  # task logs without loc=file.py:123
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://{db}",
            "AIRFLOW__CELERY__BROKER_URL": f"redis://:{s['redis_password']}@127.0.0.1:{p['redis']}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://{db}",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            # the workers import the runtime's heavy modules before their pools fork (as compose)
            "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "iterations.celery_preload.CELERY_CONFIG",
            # a broker outage delays the tasks sent meanwhile instead of failing them (celery_preload)
            "AIRFLOW__CELERY__OPERATION_TIMEOUT": "5",
            "AIRFLOW__CELERY__TASK_PUBLISH_MAX_RETRIES": "60",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(p["airflow"]),
            "AIRFLOW__API_AUTH__JWT_SECRET": s["jwt_secret"],
            "AIRFLOW__API__SECRET_KEY": s["api_secret_key"],
            "AIRFLOW__CORE__FERNET_KEY": s["fernet_key"],
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin,{REVIEWER}:user",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": os.path.join(airflow_home, "passwords.json"),
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.25",  # as docker-compose.yaml
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(p["triggerer_logs"]),
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": "stack.hostname.machine_name",
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(
                {"conn_type": "aws", "login": S3_KEY_ID, "password": s["s3_secret"],
                 "extra": {"endpoint_url": self.s3_endpoint, "region_name": "us-east-1"}}),
            "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps(
                {"conn_type": "generic", "host": "127.0.0.1", "port": p["spark_connect"]}),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
                {"conn_type": "spark", "host": "spark://127.0.0.1", "port": p["spark_master"],
                 "extra": {"deploy-mode": "client"}}),
            "ITERATIONS_SPARK_MODE": "connect",
            "ITERATIONS_LOCAL_DIR": os.path.join(self.home, "local"),
            "ITERATIONS_ALLOWED_ROOTS": ",".join([*(f"s3://{b}" for b in BUCKETS), os.path.join(self.home, "inputs")]),
            "PYTHONPATH": ROOT,
            "PATH": os.path.dirname(sys.executable) + os.pathsep + base.get("PATH", ""),
            "PYSPARK_PYTHON": sys.executable,
            **self.state.get("extra_env", {}),  # the settings it was started with
        }
        if worker is not None:
            # the machine's own: its name and its temporary folder. ITERATIONS_LOCAL_DIR (the
            # DAGs' default store and outputs) stays the shared one: on a deployment of several
            # machines it is a volume every Airflow worker and Spark process mounts (the compose
            # file's iterations-local), or the runs name S3 paths
            env.update({
                "ITERATIONS_STACK_HOSTNAME": worker,
                "TMPDIR": os.path.join(self.home, "machines", worker, "tmp"),
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(p[f"{worker}_logs"]),
            })
        return env

    # --- start ----------------------------------------------------------------------------------

    def start(self, timeout: float = 300) -> "Stack":
        """Start every service and wait until each is ready; on failure, stop what started."""
        alive = [name for name, up in self.running().items() if up]
        if alive:
            raise StackError(f"a stack is already running from {self.home} ({', '.join(alive)}): "
                             "stop it first (./run.sh stack stop)")
        os.makedirs(os.path.join(self.home, "logs"), exist_ok=True)
        os.makedirs(os.path.join(self.home, "inputs"), exist_ok=True)
        names = ["postgres", "redis", "moto", "spark_master", "spark_master_ui", "spark_connect", "airflow",
                 "triggerer_logs", *(f"{w}_logs" for w in WORKERS)]
        self.state = {
            "home": self.home,
            "ports": {name: free_port() for name in names},
            "secrets": {
                "postgres_password": secrets.token_hex(16), "redis_password": secrets.token_hex(16),
                "s3_secret": secrets.token_urlsafe(24), "jwt_secret": secrets.token_urlsafe(32),
                "api_secret_key": secrets.token_urlsafe(32), "fernet_key": _fernet_key(),
                "admin_password": secrets.token_urlsafe(12), "reviewer_password": secrets.token_urlsafe(12),
            },
            "sessions": {},
            "started": time.time(),
            "extra_env": self.extra_env,
            "spark_worker_env": self.spark_worker_env,
            "spark_worker_memory": self.spark_worker_memory,
            "spark_conf": self.spark_conf,
        }
        self._save()
        try:
            self._start_postgres(timeout)
            self._start_redis(timeout)
            self._start_moto(timeout)
            self._start_spark()
            self._start_airflow(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: list[str], env: dict[str, str], user: str | None = None,
               cwd: str = ROOT) -> subprocess.Popen:
        if name.startswith("airflow-"):  # restarted when it exits, as the compose file's `restart: always`
            argv = [sys.executable, "-m", "stack.supervise", "--", *argv]
        proc = spawn(argv, env, self.log(name), cwd=cwd, user=user)
        self.procs[name] = proc
        self._record(name, proc.pid)
        return proc

    def _start_postgres(self, timeout: float) -> None:
        # PostgreSQL refuses to run as root: as root, its files go to a folder of the postgres
        # user's (this folder's parents may be closed to it)
        user = _postgres_user()
        if user:
            try:
                owner = pwd.getpwnam(user)
            except KeyError as e:
                raise StackError("running as root, and there is no postgres user to run PostgreSQL as: "
                                 "install the postgresql package (./run.sh stack does)") from e
            pg_dir = tempfile.mkdtemp(prefix="iterations-stack-postgres-")
            os.chown(pg_dir, owner.pw_uid, owner.pw_gid)
        else:
            pg_dir = os.path.join(self.home, "postgres")
            shutil.rmtree(pg_dir, ignore_errors=True)  # a throwaway cluster: a new one at every start
            os.makedirs(pg_dir)
        self.state["postgres_dir"] = pg_dir
        self._save()
        data, pwfile = os.path.join(pg_dir, "data"), os.path.join(pg_dir, "pwfile")
        with open(pwfile, "w") as f:
            f.write(self.state["secrets"]["postgres_password"])
        if user:
            shutil.chown(pwfile, user, user)
        done = subprocess.run([_postgres_bin("initdb"), "-D", data, "-U", "airflow", f"--pwfile={pwfile}",
                               "--auth=scram-sha-256", "--encoding=UTF8", "--no-sync"],
                              env=_postgres_env(), cwd=pg_dir, user=user, group=user, extra_groups=[] if user else None,
                              capture_output=True, text=True, timeout=timeout)
        os.unlink(pwfile)
        if done.returncode != 0:
            raise StackError(f"initdb failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        self._run_postgres(user, timeout)

    def _run_postgres(self, user: str | None, timeout: float) -> None:
        """The server on the cluster initdb made (throwaway: no fsync), loopback only."""
        pg_dir, port = self.state["postgres_dir"], self.ports["postgres"]
        proc = self._spawn("postgres", [_postgres_bin("postgres"), "-D", os.path.join(pg_dir, "data"),
                                        "-p", str(port), "-k", pg_dir, "-c", "listen_addresses=127.0.0.1",
                                        "-c", "fsync=off", "-c", "max_connections=200"], _postgres_env(), user=user,
                           cwd=pg_dir)
        wait_until("PostgreSQL", lambda: listening(port), timeout, self.log("postgres"), proc)
        self._psql_until_ready(timeout)

    def _psql_until_ready(self, timeout: float) -> None:
        import psycopg2

        s, port = self.state["secrets"], self.ports["postgres"]
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=port, user="airflow", password=s["postgres_password"],
                                        dbname="postgres", connect_timeout=5)
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)  # accepting connections before it is ready for them
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = 'airflow'")
                if not cur.fetchone():
                    cur.execute("CREATE DATABASE airflow")
        finally:
            conn.close()

    def _start_redis(self, timeout: float) -> None:
        exe = shutil.which("redis-server")
        if not exe:
            raise StackError("redis-server not found: install the redis-server package (./run.sh stack does)")
        port, folder = self.ports["redis"], os.path.join(self.home, "redis")
        os.makedirs(folder, exist_ok=True)
        conf = os.path.join(folder, "redis.conf")  # the password in a file, not on a command line
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"bind 127.0.0.1\nport {port}\nrequirepass {self.state['secrets']['redis_password']}\n"
                    f"dir {folder}\nsave \"\"\nappendonly no\ndaemonize no\nprotected-mode yes\n")
        proc = self._spawn("redis", [exe, conf], dict(os.environ))
        wait_until("Redis", lambda: _redis_ping(port, self.state["secrets"]["redis_password"]), timeout,
                   self.log("redis"), proc)

    def _start_moto(self, timeout: float) -> None:
        port = self.ports["moto"]
        proc = self._spawn("moto", [_bin("moto_server"), "-H", "127.0.0.1", "-p", str(port)], dict(os.environ))
        wait_until("moto_server", lambda: listening(port), timeout, self.log("moto"), proc)
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.s3_endpoint, region_name="us-east-1",
                          aws_access_key_id=S3_KEY_ID, aws_secret_access_key=self.state["secrets"]["s3_secret"])
        for bucket in BUCKETS:
            s3.create_bucket(Bucket=bucket)

    def _start_spark(self) -> None:
        os.makedirs(os.path.join(self.home, "spark"), exist_ok=True)
        self.spark().start()

    def spark(self) -> StandaloneCluster:
        """The stack's Spark cluster (its master's status, its logs in ``workdir``), made from the
        stack's state, so that a process other than the one that started the stack can start one
        of its services again (``restart``); each process it starts is recorded."""
        if self.cluster is None:
            p = self.ports
            self.cluster = StandaloneCluster(
                os.path.join(self.home, "spark"), master_port=p["spark_master"], master_ui=p["spark_master_ui"],
                connect_port=p["spark_connect"], worker_env=dict(self.state.get("spark_worker_env", {})),
                on_start=self._record, worker_memory=self.state.get("spark_worker_memory", "2g"),
                connect_conf=dict(self.state.get("spark_conf", {})))
        return self.cluster

    def _start_airflow(self, timeout: float) -> None:
        env = self.airflow_env()
        home = env["AIRFLOW_HOME"]
        os.makedirs(home, exist_ok=True)
        fd = os.open(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({ADMIN: self.admin_password(), REVIEWER: self.state["secrets"]["reviewer_password"]}, f)
        airflow = _bin("airflow")
        done = subprocess.run([airflow, "db", "migrate"], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=max(timeout, 300))
        if done.returncode != 0:
            raise StackError(f"airflow db migrate failed ({done.returncode}):\n{done.stderr[-3000:]}")
        api = self._spawn_api_server(env)
        for component in ("scheduler", "dag-processor", "triggerer"):
            self._spawn(f"airflow-{component}", [airflow, component], env)
        workers = [self._spawn_worker(worker) for worker in WORKERS]
        wait_until("the Airflow API server", self._api_up, timeout, self.log("airflow-api-server"), api)
        for wait in workers:
            wait(timeout)
        wait_until("the scheduler, the triggerer and the DAGs parsed", self._airflow_ready, timeout,
                   self.log("airflow-scheduler"), self.procs["airflow-scheduler"])

    def _spawn_api_server(self, env: dict[str, str]) -> subprocess.Popen:
        return self._spawn("airflow-api-server", [_bin("airflow"), "api-server", "--host", "127.0.0.1",
                                                  "--port", str(self.ports["airflow"]), "--workers", "1"], env)

    def _spawn_worker(self, worker: str, more_env: dict[str, str] | None = None) -> Callable[[float], None]:
        """Start Celery worker ``worker`` (a machine of its own: its folders, its host name);
        what waits until it is ready (it says so in its log)."""
        name, env = f"airflow-{worker}", {**self.airflow_env(worker), **(more_env or {})}
        os.makedirs(env["TMPDIR"], exist_ok=True)
        ready = f"{worker}@stack ready"
        before = tail(self.log(name), 10**7).count(ready)  # a worker started again logs it again
        proc = self._spawn(name, [_bin("airflow"), "celery", "worker", "--celery-hostname", f"{worker}@stack",
                                  "--concurrency", "2"], env)

        def wait(timeout: float) -> None:
            wait_until(f"Celery worker {worker}", lambda: tail(self.log(name), 10**7).count(ready) > before,
                       timeout, self.log(name), proc)
        return wait

    def token(self, user: str = ADMIN) -> str:
        """A JWT of ``user`` (the admin, or the reviewer) from its password."""
        password = self.admin_password() if user == ADMIN else self.state["secrets"][f"{user}_password"]
        body = json.dumps({"username": user, "password": password}).encode()
        req = urllib.request.Request(self.url + "/auth/token", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["access_token"]

    def _api_up(self) -> bool:
        try:
            self.token()
            return True
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def _get(self, path: str) -> Any:
        req = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token()}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def _airflow_ready(self) -> bool:
        try:
            health = self._get("/api/v2/monitor/health")
            if any(health.get(c, {}).get("status") != "healthy" for c in ("metadatabase", "scheduler", "triggerer")):
                return False
            self._get("/api/v2/dags/iterate_pagerank")
            return True
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    # --- stop -----------------------------------------------------------------------------------

    def stop(self) -> dict[str, list[int]]:
        """Stop every recorded service (clients first), then forget them; the pids that needed a
        SIGKILL, by service."""
        sessions = self.state.get("sessions", {})
        killed: dict[str, list[int]] = {}
        for name in sorted(sessions, key=lambda n: STOP_ORDER.index(n) if n in STOP_ORDER else -1):
            hard = self._stop_service(name)
            if hard:
                killed[name] = hard
        pg_dir = self.state.get("postgres_dir")  # the throwaway cluster's files
        if pg_dir and (pg_dir == os.path.join(self.home, "postgres") or
                       pg_dir.startswith(os.path.join(tempfile.gettempdir(), "iterations-stack-postgres-"))):
            shutil.rmtree(pg_dir, ignore_errors=True)
        if self.state:
            self.state["sessions"] = {}
            self._save()
        return killed

    def _stop_service(self, name: str) -> list[int]:
        session = self.sessions()[name]
        if name == "postgres":  # SIGINT: PostgreSQL's fast shutdown (SIGTERM waits for every client to leave)
            return session.stop(sig=signal.SIGINT, leader_only=True)
        return session.stop()

    # --- one service ------------------------------------------------------------------------------

    def restart(self, name: str, timeout: float = 300, env: dict[str, str] | None = None) -> None:
        """Stop service ``name`` (every process of its session), then start it again the same way
        (PostgreSQL on its data, Redis empty, the Spark master on its ports, an Airflow component,
        a Celery worker, a Spark worker, the Spark Connect server: a new application on the
        cluster). ``env``: more environment for this start of a Celery worker (its machine's)."""
        if name not in self.sessions():
            raise StackError(f"no service {name!r} in the stack at {self.home}: {', '.join(sorted(self.sessions()))}")
        self._stop_service(name)
        if name in ("spark-worker-1", "spark-worker-2"):
            self.spark().start_worker(int(name.rsplit("-", 1)[1]))
        elif name == "spark-connect":
            port = self.ports["spark_connect"]
            wait_until("the old Spark Connect server to go", lambda: not listening(port), 60)
            self.spark().start_connect()
        elif name == "spark-master":  # on its ports: the workers and the Connect server's application find it again
            self.spark().start_master()
        elif name == "postgres":
            self._run_postgres(_postgres_user(), timeout)
        elif name == "redis":  # empty, as a broker without persistence comes back
            self._start_redis(timeout)
        elif name.startswith("airflow-"):
            component = name[len("airflow-"):]
            airflow = _bin("airflow")
            if component in WORKERS:
                self._spawn_worker(component, env)(timeout)
            elif component in ("scheduler", "dag-processor", "triggerer"):
                self._spawn(name, [airflow, component], self.airflow_env())
            elif component == "api-server":
                api = self._spawn_api_server(self.airflow_env())
                wait_until("the Airflow API server", self._api_up, timeout, self.log(name), api)
            else:
                raise StackError(f"restarting {name} is not supported")
        else:
            raise StackError(f"restarting {name} is not supported")

    def kill(self, name: str) -> list[int]:
        """A machine dies: SIGKILL every process of service ``name`` at once, no goodbye."""
        session = self.sessions()[name]
        victims = session.members()
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        session.stop(grace=15)
        return victims

    def env_script(self) -> str:
        """``export`` lines that make ``airflow`` commands in a shell talk to this stack."""
        keep = {k: v for k, v in self.airflow_env().items() if k.startswith(("AIRFLOW", "ITERATIONS_", "PYSPARK"))}
        return "".join(f"export {k}={_shell_quote(v)}\n" for k, v in sorted(keep.items()))


def _fernet_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _redis_ping(port: int, password: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            got = b""
            deadline = time.monotonic() + 2
            while b"PONG" not in got and time.monotonic() < deadline:
                chunk = s.recv(256)
                if not chunk:
                    break
                got += chunk
            return b"+PONG" in got
    except OSError:
        return False

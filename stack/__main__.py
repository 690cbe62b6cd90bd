"""``python -m stack [start|stop|status] [--home DIR]`` (``./run.sh stack ...``): the services of
docker-compose.yaml natively on loopback, their state under ``.local/stack/``."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from stack.procs import ROOT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./run.sh stack", description=__doc__)
    parser.add_argument("action", nargs="?", default="start", choices=("start", "stop", "status"))
    parser.add_argument("--home", default=os.path.join(ROOT, ".local", "stack"),
                        help="the stack's folder (default: .local/stack of the checkout)")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for every Airflow component (an AIRFLOW__SECTION__KEY "
                             "setting, say); repeatable")
    parser.add_argument("--spark-worker-setting", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for the Spark workers and their executors; repeatable")
    parser.add_argument("--spark-worker-memory", default="2g", metavar="SIZE",
                        help="the memory each of the two Spark workers offers its executors (default 2g)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting of the Spark Connect server's application (the epochs' driver and "
                             "executors), e.g. spark.executor.memory=3g (default 768m); repeatable")
    args = parser.parse_args(argv)

    from stack.services import Stack, StackError

    try:
        settings = _pairs(args.setting, "--setting")
        worker_settings = _pairs(args.spark_worker_setting, "--spark-worker-setting")
        spark_conf = _pairs(args.spark_conf, "--spark-conf", spark=True)
    except ValueError as e:
        parser.error(str(e))
    if not re.fullmatch(r"[1-9][0-9]*[mMgG]", args.spark_worker_memory):
        parser.error(f"--spark-worker-memory must be a size such as 768m or 4g, got {args.spark_worker_memory!r}")
    if (settings or worker_settings or spark_conf or args.spark_worker_memory != "2g") and args.action != "start":
        parser.error("--setting, --spark-worker-setting, --spark-worker-memory and --spark-conf go with start only")
    stack = Stack(args.home, extra_env=settings, spark_worker_env=worker_settings,
                  spark_worker_memory=args.spark_worker_memory, spark_conf=spark_conf)
    if args.action == "status":
        running = stack.running()
        if not running:
            print(f"no stack recorded in {stack.home}")
            return 1
        for name, up in running.items():
            print(f"{name:24s} {'running' if up else 'stopped'}")
        return 0 if all(running.values()) else 1
    if args.action == "stop":
        if not stack.state.get("sessions"):
            print(f"nothing to stop: no running stack recorded in {stack.home}")
            return 0
        names = list(stack.state["sessions"])
        killed = stack.stop()
        print(f"stopped {', '.join(names)}")
        for name, pids in killed.items():
            print(f"  {name}: {len(pids)} process(es) did not stop on SIGTERM and were killed")
        return 0

    started = time.monotonic()
    print(f"starting the stack in {stack.home} (PostgreSQL, Redis, moto_server, Spark master, 2 workers and "
          "Spark Connect, Airflow with 2 Celery workers); takes a minute or two", flush=True)
    try:
        stack.start()
    except StackError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    env_file = os.path.join(stack.home, "env.sh")
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(stack.env_script())
    p = stack.ports
    print(f"""ready in {time.monotonic() - started:.0f} s
  Airflow UI and API   {stack.url}  (user admin, password in {stack.home}/airflow/passwords.json)
  Spark master UI      http://127.0.0.1:{p['spark_master_ui']}
  Spark Connect        sc://127.0.0.1:{p['spark_connect']}
  S3 (moto_server)     {stack.s3_endpoint}  buckets iterations-checkpoints, -outputs, -inputs
  PostgreSQL, Redis    127.0.0.1:{p['postgres']}, 127.0.0.1:{p['redis']}
  logs                 {stack.home}/logs/
The airflow command against this stack:  source {env_file}  (then e.g. airflow dags list)
Stop everything it started:              ./run.sh stack stop""")
    return 0


def _pairs(values: list[str], option: str, spark: bool = False) -> dict[str, str]:
    """NAME=VALUE pairs: environment variables' names, or (``spark``) Spark settings' (spark.*)."""
    pairs = {}
    for value in values:
        name, sep, setting = value.partition("=")
        if spark:
            if not sep or not re.fullmatch(r"spark\.[A-Za-z0-9_.\-]+", name):
                raise ValueError(f"{option} {value!r}: expected NAME=VALUE with a Spark setting's name (spark.*)")
        elif not sep or not name or not name.replace("_", "").isalnum() or name[0].isdigit():
            raise ValueError(f"{option} {value!r}: expected NAME=VALUE with an environment variable's name")
        pairs[name] = setting
    return pairs


if __name__ == "__main__":
    sys.exit(main())

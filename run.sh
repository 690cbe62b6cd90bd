#!/usr/bin/env bash
# One entry point for a newcomer and for CI.
#   ./run.sh demo   set up everything, then run PageRank end to end on the embedded default
#                   (local Spark, local checkpoint store under .local/)
#   ./run.sh test   set up everything, then run the test suite (ITERATIONS_TEST_WORKERS parallel
#                   workers, 2 by default; pytest's own arguments follow, e.g. -m "not slow" -n 0)
#   ./run.sh stack  set up, then start the production stack natively (PostgreSQL, Redis, Celery,
#                   Spark standalone, moto_server): `./run.sh stack stop` stops it (docs/cluster.md)
#   ./run.sh ui     set up, then start the Airflow UI on this machine (airflow standalone, port
#                   ITERATIONS_UI_PORT or 8080): `./run.sh ui stop` stops every process it started
#   ./run.sh setup  only set up (.venv with every pinned requirement, Java 17 if missing; the tests
#                   add chromium, PostgreSQL and Redis, which only they need)
# Each command installs only what it runs: demo requirements-demo.txt, ui requirements.txt,
# stack requirements-stack.txt, test and setup requirements-test.txt (which includes the others).
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY=${PYTHON:-python3.11}
UV_VERSION=0.13.9  # the installer (pip installs it into .venv, then it installs the rest)
command -v "$PY" >/dev/null 2>&1 || PY=python3

log() { printf '[run.sh] %s\n' "$*" >&2; }

# pip, minus the warnings some machines' pip configuration prints for absent local indexes.
pip_quiet() {
  "$VENV/bin/pip" "$@" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
}

ensure_java() {
  if command -v java >/dev/null 2>&1; then
    local major
    major=$(java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print v[1]; exit}')
    if [ -n "$major" ] && [ "$major" -ge 17 ]; then return 0; fi
    log "java $major found; Spark 4 needs 17 or newer"
  fi
  log "installing Java 17 (openjdk-17-jre-headless) with apt-get"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq openjdk-17-jre-headless >/dev/null
}

# The browser test of the Iterations view drives Debian's chromium through its chromedriver.
ensure_chromium() {
  if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then return 0; fi
  log "installing chromium and chromium-driver with apt-get (the Iterations view's browser test)"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
}

# The native production stack (./run.sh stack, and its tests) runs Debian's PostgreSQL and Redis.
ensure_stack_services() {
  if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && command -v redis-server >/dev/null 2>&1; then
    return 0
  fi
  log "installing postgresql and redis-server with apt-get (the native stack)"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql redis-server >/dev/null
}

# Installs one set of pinned requirements (requirements-<set>.txt; "runtime": requirements.txt)
# into .venv, once per change of the pins: each command installs what it runs and no more.
ensure_venv() {
  local set=$1
  local file=requirements-$set.txt
  [ "$set" = runtime ] && file=requirements.txt
  local stamp="$VENV/.installed-$set"
  local want
  # the pins, the project's packaging, and where the checkout is (an editable install points at it)
  want=$( (cat requirements*.txt constraints.txt pyproject.toml; echo "$ROOT $UV_VERSION bytecode") | sha256sum | cut -d' ' -f1)
  local installed
  for installed in "$stamp" "$VENV/.installed-test"; do  # the test set includes every other
    if [ -f "$installed" ] && [ "$(cat "$installed")" = "$want" ]; then return 0; fi
  done
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating virtual environment in .venv with $($PY --version)"
    "$PY" -m venv "$VENV"
  fi
  log "installing the pinned requirements with uv ($file)"
  local started=$SECONDS
  # uv installs the same pins and constraints as pip would, several times faster (bench/RESULTS.md)
  pip_quiet install -q "uv==$UV_VERSION"
  local uv=("$VENV/bin/uv" pip install -q --python "$VENV/bin/python")
  "${uv[@]}" -r "$file" -c constraints.txt
  # pyspark-client (required by the spark provider) shares the pyspark package directory:
  # install pyspark again last so the Python files match its 4.3.0 jars. Uninstall, then install
  # from the build just cached (`--reinstall` implies `--refresh`: a second build of the sdist)
  "$VENV/bin/uv" pip uninstall -q --python "$VENV/bin/python" pyspark
  "${uv[@]}" --no-deps "$(grep -E '^pyspark==' requirements.txt)"
  "$VENV/bin/python" -c 'import pyspark, sys; v = pyspark.__version__; sys.exit(0 if v.startswith("4.3.") else f"pyspark {v} installed, 4.3.x expected")'
  # the project itself, editable (pyproject.toml): include, spark_jobs and the plugin package
  # iterations import from this checkout in every process, Spark's Python workers included
  "${uv[@]}" --no-deps -e .
  # bytecode for every installed module, once: where PYTHONDONTWRITEBYTECODE is set (CI
  # machines, containers) Python would otherwise compile Airflow, pandas, pyarrow... from source
  # in every process it starts, each task and each Spark Python worker (bench/RESULTS.md)
  log "compiling the installed packages to bytecode"
  "$VENV/bin/python" -m compileall -q -j 0 "$VENV/lib" >/dev/null
  # uv keeps each revision of pyspark's sdist it builds (1.9 GB; the index serves a new revision
  # to each setup): keep only what is reachable, or every fresh clone grows the cache
  "$VENV/bin/uv" cache prune -q
  log "installed in $((SECONDS - started)) s"
  touch "$VENV/.installed"  # when the environment last changed (ensure_class_archive)
  echo "$want" > "$stamp"
}

setup() {
  ensure_java
  ensure_venv "${1:-test}"
  # the project's own modules too (only what changed since the last run is compiled again; a
  # file that does not compile is left to fail where it is imported, with Python's own message)
  "$VENV/bin/python" -m compileall -q -j 0 include spark_jobs plugins dags stack tests bench examples >/dev/null 2>&1 || true
  export PYSPARK_PYTHON="$VENV/bin/python"
  export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
}

# The tests' JVMs map the classes a Spark JVM loads from an archive (tests/jvm.py), written
# once per install: a Spark JVM starts in about half the time and CPU.
ensure_class_archive() {
  local archive="$VENV/spark-classes.jsa"
  if [ -f "$archive" ] && [ "$archive" -nt "$VENV/.installed" ]; then return 0; fi
  log "writing the test JVMs' class-data archive (once per install, about a minute)"
  "$VENV/bin/python" -m tests.jvm >/dev/null || log "no class-data archive: the tests' JVMs start without it"
}

cmd=${1:-help}
shift || true
case "$cmd" in
  setup)
    setup
    log "ready: activate with 'source .venv/bin/activate'"
    ;;
  demo)
    setup demo
    exec "$VENV/bin/python" -m spark_jobs.demo "$@"
    ;;
  stack)
    setup stack
    ensure_stack_services
    exec "$VENV/bin/python" -m stack "$@"
    ;;
  ui)
    setup runtime
    exec "$VENV/bin/python" -m stack.ui "$@"
    ;;
  test)
    setup test
    ensure_chromium
    ensure_stack_services
    ensure_class_archive
    # most tests wait on servers and subprocesses rather than compute: whole modules run on
    # parallel workers (tests/conftest.py orders them, longest first)
    status=0
    started=$(date +%s)
    "$VENV/bin/python" -m pytest -n "${ITERATIONS_TEST_WORKERS:-2}" --dist loadscope "$@" || status=$?
    # where this run's time and CPU went (tests/profiling.py wrote it): a report, never a failure
    "$VENV/bin/python" -m bench.suite_profile --newer-than "$started" || true
    exit "$status"
    ;;
  *)
    echo "usage: ./run.sh demo|test|ui|stack|setup [args...]" >&2
    exit 2
    ;;
esac

"""Fault injection for tests: named failure points, and S3 faults. Off, and one dict lookup
(failpoints) or one check per S3 client (S3 faults), unless ITERATIONS_FAILPOINTS or
ITERATIONS_S3_FAULTS is set.

Syntax: ``name[@key=value...]=action`` separated by ``;``, for example::

    ITERATIONS_FAILPOINTS="tail.partition_written@epoch=3@partition=1=kill-driver"

Actions: ``kill`` (SIGKILL this process), ``kill-driver`` (SIGKILL the driver, whose pid the
Spark session helper puts in ITERATIONS_DRIVER_PID before the JVM starts: its whole process
group when it leads one, as when a machine dies, else the driver and this process),
``raise`` (raise FailpointError), ``raise-once`` and ``kill-once`` (the same, the first time
any process reaches the point; later arrivals, such as the retry of the task that failed,
pass: a marker ``<spec>.fired`` in ITERATIONS_FAILPOINT_DIR, created exclusively, records
it), ``hold`` (stop here once, so that a test can act while this
process is in the middle of its work, e.g. kill the machine it runs on: the first process to
reach the point creates ``<spec>.held`` in the directory ITERATIONS_FAILPOINT_DIR, holding its
pid, and waits until ``<spec>.release`` appears there, ``<spec>`` being the point's name and
conditions as written, ``tail.partition_written@epoch=3@partition=1``; later arrivals, such as
Spark's retry of the task, pass).

``ITERATIONS_FAILPOINTS_FILE=path``: the points are (also) read from that file, again whenever
it changes, so that a long-lived process (a Spark Connect server's Python workers) takes the
points a test sets for each scenario. Every point that fires is traced (``failpoint.fired``).
"""

from __future__ import annotations

import os
import signal

from include.process import settings

ENV = settings.FAILPOINTS.name
FILE_ENV = settings.FAILPOINTS_FILE.name
DRIVER_PID_ENV = settings.DRIVER_PID.name
DIR_ENV = settings.FAILPOINT_DIR.name
HOLD_LIMIT_S = 600.0
ACTIONS = ("kill", "kill-driver", "raise", "hold", "raise-once", "kill-once")
#: every failure point the code places (a spec naming another is refused: it would never fire)
POINTS = frozenset({
    "head.before_plan", "head.after_plan", "head.after_run", "epoch.before_write", "tail.partition_written",
    "epoch.before_align", "align.before_read", "align.before_decide", "coordinator.triggered",
    "commit.before_write", "commit.after_write", "commit.after_release", "epoch.before_land",
    "publish.before_output", "publish.after_stage",
    "publish.after_output", "finish.before_plan", "finish.after_plan", "finish.after_run",
    "finish.before_final_checkpoint", "finish.after_final_checkpoint",
})


class FailpointError(RuntimeError):
    pass


def _parse(text: str) -> dict[str, list[tuple[dict[str, str], str]]]:
    points: dict[str, list[tuple[dict[str, str], str]]] = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        spec, _, action = item.rpartition("=")
        name, *conds = spec.split("@")
        where = dict(c.split("=", 1) for c in conds)
        if action not in ACTIONS:
            raise ValueError(f"failpoint {item!r}: action must be one of {', '.join(ACTIONS)}")
        if name not in POINTS:
            raise ValueError(f"failpoint {item!r}: no failure point {name!r}; the points are {', '.join(sorted(POINTS))}")
        points.setdefault(name, []).append((where, action))
    return points


_ACTIVE = _parse(settings.FAILPOINTS.raw() or "")
_FILE: dict[str, object] = {"path": settings.FAILPOINTS_FILE.get(), "stamp": None, "points": {}}


def configure(text: str) -> None:
    """Replace the active failpoints (tests in one process; others use the environment)."""
    global _ACTIVE
    _ACTIVE = _parse(text)


def _from_file() -> dict[str, list[tuple[dict[str, str], str]]]:
    path = _FILE["path"]
    try:
        st = os.stat(path)
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    if stamp != _FILE["stamp"]:
        with open(path) as f:
            _FILE["points"] = _parse(f.read())
        _FILE["stamp"] = stamp
    return _FILE["points"]  # type: ignore[return-value]


def failpoint(name: str, **context: object) -> None:
    """Trigger the failure configured for ``name`` if its conditions match ``context``."""
    if not _ACTIVE and not _FILE["path"]:
        return
    if name not in POINTS:  # checked only while points are armed: free when off
        raise ValueError(f"failure point {name!r} is not declared in include.process.failpoints.POINTS")
    points = [*_ACTIVE.get(name, ()), *(_from_file().get(name, ()) if _FILE["path"] else ())]
    for where, action in points:
        if all(str(context.get(k)) == v for k, v in where.items()):
            spec = name + "".join(f"@{k}={v}" for k, v in where.items())
            if action.endswith("-once"):
                if not _first_time(spec):
                    continue
                action = action[:-len("-once")]
            trace("failpoint.fired", point=spec, action=action)
            if action == "raise":
                raise FailpointError(f"failpoint {name} {context}")
            if action == "hold":
                _hold(spec)
                continue
            if action == "kill-driver" and settings.DRIVER_PID.is_set():
                driver = settings.DRIVER_PID.get()
                if os.getpgid(driver) == driver:
                    os.killpg(driver, signal.SIGKILL)
                os.kill(driver, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)


def _first_time(spec: str) -> bool:
    """Whether this is the first arrival at ``spec`` (of any process): one exclusive create."""
    where = settings.FAILPOINT_DIR.get()
    if not where:
        raise FailpointError(f"failpoint {spec}: a -once action needs the directory {DIR_ENV}")
    try:
        fd = os.open(os.path.join(where, f"{spec}.fired"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


def _hold(name: str) -> None:
    import time

    where = settings.FAILPOINT_DIR.get()
    if not where:
        raise FailpointError(f"failpoint {name}: hold needs the directory {DIR_ENV}")
    held = os.path.join(where, f"{name}.held")
    draft = f"{held}.{os.getpid()}"
    with open(draft, "w") as f:
        f.write(str(os.getpid()))
    try:
        os.link(draft, held)  # exclusive, and complete when seen
    except FileExistsError:  # held once already: a later arrival passes
        return
    finally:
        os.remove(draft)
    release = os.path.join(where, f"{name}.release")
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise FailpointError(f"failpoint {name}: held {HOLD_LIMIT_S:.0f}s, never released")
        time.sleep(0.05)


# --- trace and clock skew ------------------------------------------------------------------

TRACE_ENV = settings.TRACE.name
SKEW_ENV = settings.CLOCK_SKEW.name


def trace(event: str, **context: object) -> None:
    """Append ``event`` to the file named by ITERATIONS_TRACE (one JSON line; nothing when
    unset). The fault suite counts commits and publications from it across processes."""
    path = settings.TRACE.get()
    if not path:
        return
    import json
    import time

    # the wall clock (not skewed): the chaos run measures from it how long a fault held up the next commit
    line = json.dumps({"event": event, "pid": os.getpid(), "time": round(time.time(), 3), **context},
                      sort_keys=True, default=str)
    with open(path, "a") as f:  # one short line per write: appends do not interleave
        f.write(line + "\n")


def clock_skew() -> float:
    """Seconds added to this process's wall clock (ITERATIONS_CLOCK_SKEW, e.g. ``-600``): the
    timestamps the runtime writes are informational, and tests skew them to prove it."""
    text = settings.CLOCK_SKEW.raw()
    if not text:
        return 0.0
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{SKEW_ENV} must be a number of seconds, got {text!r}") from None


# --- S3 faults ---------------------------------------------------------------------------------

S3_ENV = settings.S3_FAULTS.name
S3_LOG_ENV = settings.S3_FAULTS_LOG.name
S3_KINDS = ("500", "503", "throttle", "timeout")


def _parse_s3(text: str) -> dict[str, object] | None:
    """``rate=0.07,seed=3,kinds=500|503|throttle|timeout,lose_reply=checkpoints/``: each S3
    call fails with probability ``rate`` before it is sent (a 500 InternalError, a 503
    ServiceUnavailable, a 503 SlowDown, or a read time-out); ``lose_reply``: the first PutObject
    whose key contains the string (in each process) is accepted by S3 and its reply lost."""
    if not text.strip():
        return None
    conf: dict[str, object] = {"rate": 0.0, "seed": 0, "kinds": S3_KINDS, "lose_reply": None}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in conf:
            raise ValueError(f"{S3_ENV}: {item!r}: expected rate=, seed=, kinds= or lose_reply=")
        if key == "rate":
            conf["rate"] = float(value)
        elif key == "seed":
            conf["seed"] = int(value)
        elif key == "kinds":
            kinds = tuple(value.split("|"))
            bad = [k for k in kinds if k not in S3_KINDS]
            if bad:
                raise ValueError(f"{S3_ENV}: unknown fault kind(s) {bad}; accepted: {'|'.join(S3_KINDS)}")
            conf["kinds"] = kinds
        else:
            conf["lose_reply"] = value
    return conf


_S3 = _parse_s3(settings.S3_FAULTS.raw() or "")


def configure_s3(text: str) -> None:
    """Replace the S3 fault settings for clients created from now on in this process."""
    global _S3
    _S3 = _parse_s3(text)


def install_s3_faults(client, endpoint_url: str | None = None) -> None:
    """Register the configured S3 faults on a boto3 client; nothing when none are set."""
    if _S3 is None:
        return
    import random

    from botocore.awsrequest import AWSResponse
    from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

    conf = _S3
    rng = random.Random(f"{conf['seed']}:{os.getpid()}:{id(client)}")
    lost = {"done": False}
    bodies = {
        "500": (500, b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"),
        "503": (503, b"<Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>"),
        "throttle": (503, b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"),
    }

    def record(kind: str, operation: str) -> None:
        path = settings.S3_FAULTS_LOG.get()
        if path:
            with open(path, "a") as f:  # one short line per fault: appends do not interleave
                f.write(f"{os.getpid()} {kind} {operation}\n")

    def before_send(request, **kwargs):
        if rng.random() >= float(conf["rate"]):
            return None
        kind = rng.choice(conf["kinds"])
        record(kind, request.method)
        if kind == "timeout":
            raise ReadTimeoutError(endpoint_url=endpoint_url or request.url)
        status, body = bodies[kind]

        class Raw:
            def stream(self, **kw):
                yield body

        return AWSResponse(request.url, status, {}, Raw())

    def after_put(http_response, parsed, model, context=None, **kwargs):
        key = str(((context or {}).get("input_params") or {}).get("Key", ""))
        if conf["lose_reply"] and not lost["done"] and conf["lose_reply"] in key \
                and http_response is not None and http_response.status_code == 200:
            lost["done"] = True
            record("lost-reply", f"PutObject {key}")
            raise ConnectionClosedError(endpoint_url=endpoint_url or "s3")

    client.meta.events.register("before-send.s3", before_send)
    client.meta.events.register("after-call.s3.PutObject", after_put)
    trace("s3_faults.installed", rate=conf["rate"])  # which processes' clients carry the faults

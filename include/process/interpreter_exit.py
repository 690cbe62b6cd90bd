"""The end of a process that ran epochs: leave its heap to the operating system.

A process that ran an iteration holds a large heap of long-lived objects: Airflow (in
``airflow dags test`` and ``tasks test``), Great Expectations, pandas, pyarrow, the Spark
Connect client; hundreds of thousands of objects after a ``dags test``. When the interpreter
exits it collects that heap again and again as it tears its modules down: seconds after the
last task of a ``dags test`` and after ``run_job``, all of it in the garbage collector, after
``main`` had returned (bench/RESULTS.md has the figures). Nothing there needs it: the runtime's
files are closed where they are written, Spark Connect clients, database sessions and log
handlers are closed by atexit handlers, which run first, and the memory goes back to the
system with the process. Airflow's own task processes end with ``os._exit`` for the same
reason, skipping far more.

:func:`skip_exit_collection` makes the collections at exit skip what is alive when the atexit
handlers run (``gc.freeze``): objects in reference cycles then are not finalised at exit, as
under ``os._exit``. ``ITERATIONS_COLLECT_AT_EXIT=1`` keeps Python's default.
"""

from __future__ import annotations

import atexit
import gc
import threading

from include.process.settings import COLLECT_AT_EXIT

COLLECT_AT_EXIT_ENV = COLLECT_AT_EXIT.name

_registered = False
_lock = threading.Lock()


def skip_exit_collection() -> bool:
    """Register, once per process, the freeze of the heap at exit; whether it is registered."""
    global _registered
    if COLLECT_AT_EXIT.get():
        return False
    with _lock:
        if not _registered:
            atexit.register(gc.freeze)
            _registered = True
    return True

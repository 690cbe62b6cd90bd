"""``PreloadingLocalExecutor``: Airflow's LocalExecutor whose task processes start with the
iteration runtime's heavy modules already imported.

LocalExecutor forks its workers from the scheduler when it starts, and each worker forks a
process per task; a module the scheduler imported before that is imported in every task. This
executor imports the modules of ``[iterations] preload_modules`` (environment:
``AIRFLOW__ITERATIONS__PRELOAD_MODULES``; default ``include.process.preloading.DEFAULT_MODULES``: Great
Expectations, the Spark Connect client, the runtime) in the scheduler, then starts as
LocalExecutor does. Each epoch's commit task then skips Great Expectations' import (~2.5 s
here) and each run task the Spark Connect client's (~0.8 s). Use it with::

    AIRFLOW__CORE__EXECUTOR=iterations.executors.PreloadingLocalExecutor

The scheduler takes that much longer to start and holds the modules (about 230 MB resident,
shared copy-on-write with its workers). An empty ``preload_modules`` makes it LocalExecutor.
"""

from __future__ import annotations

from airflow.configuration import conf
from airflow.executors.local_executor import LocalExecutor

from include.process import parse_modules, preload


class PreloadingLocalExecutor(LocalExecutor):
    """LocalExecutor that imports ``[iterations] preload_modules`` before forking its workers."""

    def start(self) -> None:
        modules = parse_modules(conf.get("iterations", "preload_modules", fallback=None))
        if modules:
            seconds = preload(modules)
            self.log.info("Preloaded for the task processes in %.1f s: %s", sum(seconds.values()),
                          ", ".join(f"{m} {s:.2f} s" for m, s in seconds.items()))
        super().start()

"""Where the project runs from, and where its embedded defaults live.

Which locations a run may name is include.store (the grammar, the allowed roots, the
borders of stores): one rule for the runs, the stop DAG and the Iterations view.
"""

from __future__ import annotations

import os

from include.process.settings import LOCAL_DIR as LOCAL_DIR_SETTING

#: the checkout the project runs from (./run.sh installs it editable: its packages stay here)
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: where the embedded defaults live: demo input, the local checkpoint store, outputs, the demo's
#: Airflow home, the embedded Spark Connect server's state
LOCAL_DIR = LOCAL_DIR_SETTING.get() or os.path.join(PROJECT_ROOT, ".local")

__all__ = ["LOCAL_DIR", "PROJECT_ROOT"]

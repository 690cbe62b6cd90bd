"""The project's layers (.importlinter): the core imports neither Airflow nor Spark nor
spark_jobs; the Spark side imports nothing from Airflow (checked with import-linter); a body's
metadata and the Airflow side load without pyspark."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def lint_imports(config: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "plugins")])}
    exe = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    return subprocess.run([exe, config, "--no-cache"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_layers_are_kept():
    done = lint_imports(os.path.join(ROOT, ".importlinter"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout, done.stdout


def test_a_broken_layer_is_reported(tmp_path):
    """The same tool with a contract the code breaks (the runner imports the core): it fails
    and names the import, so the test above can fail."""
    config = tmp_path / "contracts.ini"
    config.write_text("[importlinter]\nroot_packages =\n    include\n    spark_jobs\n\n"
                      "[importlinter:contract:x]\nname = runner without the core\ntype = forbidden\n"
                      "source_modules =\n    spark_jobs.runner\nforbidden_modules =\n    include.runs\n")
    done = lint_imports(str(config))
    assert done.returncode != 0
    assert "spark_jobs.runner -> include.runs" in done.stdout, done.stdout


NO_PYSPARK = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ImportError(f"{name} imported by a process that plans, aligns or commits")

sys.meta_path.insert(0, Refuse())
from include.contract.body import BUILTIN_BODIES, resolve_body
for name in sorted(BUILTIN_BODIES):
    body = resolve_body(name)
    meta = body.describe()
    assert meta["name"] == name and meta["heads"], meta
    body.parse_params({})
import include.runs.boundary, include.epoch.job
import iterations.operators.epoch, iterations.sensors.alignment, iterations.triggers.alignment
print("loaded:", sorted(m for m in sys.modules if m.startswith("pyspark")))
"""


def test_a_bodys_metadata_and_the_airflow_side_load_without_pyspark():
    """What the commit task, the sensor and the triggerer load (the bodies' metadata, the
    core, the operators) imports no pyspark: pyspark is refused in the child process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "plugins")])}
    done = subprocess.run([sys.executable, "-c", NO_PYSPARK], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "loaded: []" in done.stdout

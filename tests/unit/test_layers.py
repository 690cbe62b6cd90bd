"""The project's layers (.importlinter): the core imports neither Airflow nor Spark nor
spark_jobs; the Spark side imports nothing from Airflow; both use the core's public surfaces
only; the core's packages import only the packages below them (checked with import-linter). No
module imports another's private (``_``) name; the linter (ruff) passes on the whole tree; a
body's metadata and the Airflow side load without pyspark."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from tests.docs import parse_python

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


def contract(name: str) -> str:
    """One contract of .importlinter, as its own section."""
    text = open(os.path.join(ROOT, ".importlinter")).read()
    start = text.index(f"[importlinter:contract:{name}]")
    end = text.find("[importlinter:contract:", start + 1)
    return text[start:end if end != -1 else None]


def test_a_module_of_the_core_imported_from_outside_is_reported(tmp_path):
    """The surfaces contract over a package that imports a module of the core rather than its
    package's surface: broken, naming the import."""
    (tmp_path / "iterations_probe").mkdir()
    (tmp_path / "iterations_probe" / "__init__.py").write_text(
        "from include.epoch import IterationJob\nfrom include.epoch.job import IterationJob as Job\n")
    config = tmp_path / "contracts.ini"
    config.write_text("[importlinter]\nroot_packages =\n    include\n    iterations_probe\n\n"
                      + contract("surfaces").replace("    spark_jobs\n    iterations\n", "    iterations_probe\n"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, str(tmp_path)])}
    exe = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    done = subprocess.run([exe, str(config), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    assert "iterations_probe -> include.epoch.job" in done.stdout, done.stdout
    assert "iterations_probe -> include.epoch\n" not in done.stdout


def test_an_upward_import_in_the_core_is_reported(tmp_path):
    """The map contract with the store importing the runs above it: broken, naming it."""
    config = tmp_path / "contracts.ini"
    config.write_text("[importlinter]\nroot_packages =\n    include\n\n"
                      + contract("map").replace("    store\n    process\n", "    process\n    store\n"))
    done = lint_imports(str(config))
    assert done.returncode != 0
    assert "include.store" in done.stdout and "include.process" in done.stdout, done.stdout


def python_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    return [f for f in listed if os.path.exists(os.path.join(ROOT, f))]


def test_no_module_imports_another_modules_private_name():
    """A ``_`` name is its module's own: no module of the project imports one from another."""
    found = []
    for path in python_files():
        if not path.startswith(("include/", "plugins/", "spark_jobs/", "dags/", "examples/")):
            continue
        tree = parse_python(os.path.join(ROOT, path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.split(".")[0] in ("include", "spark_jobs", "iterations"):
                found += [f"{path}:{node.lineno}: {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_the_linter_passes_on_the_whole_tree():
    """ruff, configured once in pyproject.toml, over every Python file of the checkout."""
    exe = os.path.join(os.path.dirname(sys.executable), "ruff")
    done = subprocess.run([exe, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


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


def test_the_map_in_the_docs_is_the_contracts():
    """docs/how-it-works.md's map of the core lists the layers of the map contract, in order."""
    import re

    text = open(os.path.join(ROOT, "docs", "how-it-works.md")).read()
    documented = re.findall(r"^\| \d+ \| `include\.(\w+)` \|", text, re.M)
    layers = contract("map").split("layers =")[1].split("ignore_imports")[0].split()
    assert documented + ["errors"] == layers
    packages = sorted(d for d in os.listdir(os.path.join(ROOT, "include"))
                      if os.path.isfile(os.path.join(ROOT, "include", d, "__init__.py")))
    assert sorted(documented) == packages

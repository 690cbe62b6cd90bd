"""Every environment variable the project reads is declared once (include.process.settings), read
through its declaration only, and listed in docs/configuration.md."""

from __future__ import annotations

import ast
import os
import re
import subprocess

import pytest

from include.errors import ConfigError
from include.process import PROJECT_ROOT
from include.process.settings import SETTINGS, Setting
from tests.conftest import ROOT

SETTINGS_MODULE = "include/process/settings.py"


def env_tables() -> dict[str, str]:
    """The variables of docs/configuration.md's environment tables, each with its section."""
    text = open(os.path.join(ROOT, "docs", "configuration.md")).read()
    part = text[text.index("## Environment variables"):text.index("## A job's settings")]
    found, section = {}, "Environment variables"
    for line in part.splitlines():
        if line.startswith("#"):
            section = line.lstrip("# ").strip()
        for name in re.findall(r"^\| `([A-Z][A-Z0-9_]+)`", line) + re.findall(r"^\| `[A-Z_]+`, `([A-Z_]+)`", line):
            found[name] = section
    return found


def test_every_setting_is_documented_and_every_documented_variable_is_declared():
    tables = env_tables()
    declared = set(SETTINGS)
    missing = sorted(declared - set(tables))
    assert not missing, f"declared in {SETTINGS_MODULE} but not in docs/configuration.md: {missing}"
    ours = {n for n in tables if n.startswith("ITERATIONS_")}
    assert not ours - declared, f"in docs/configuration.md but not declared: {sorted(ours - declared)}"


def test_test_only_and_internal_settings_are_listed_apart():
    tables = env_tables()
    for name, setting in SETTINGS.items():
        apart = tables[name] == "For tests and internals"
        assert apart == (setting.audience in ("tests", "internal")), (name, setting.audience, tables[name])


def python_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    return [f for f in listed if f.startswith(("include/", "plugins/", "spark_jobs/", "dags/", "examples/"))
            and os.path.exists(os.path.join(ROOT, f))]


def environment_reads(source: str) -> list[int]:
    """Lines that read the environment: os.environ.get(...), os.environ[...] loaded, os.getenv,
    `... in os.environ`. Passing the environment on ({**os.environ}) and setdefault are not reads."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        environ = lambda n: isinstance(n, ast.Attribute) and n.attr == "environ"  # noqa: E731
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if (node.func.attr == "get" and environ(node.func.value)) or node.func.attr == "getenv":
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and environ(node.value) and isinstance(node.ctx, ast.Load):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(environ(c) for c in node.comparators):
            lines.append(node.lineno)
    return lines


def test_no_module_but_the_settings_reads_the_environment():
    found = [f"{path}:{line}" for path in python_files() if path != SETTINGS_MODULE
             for line in environment_reads(open(os.path.join(ROOT, path)).read())]
    assert not found, "environment read outside include.process.settings:\n" + "\n".join(found)


def test_the_environment_read_finder_finds_each_way_of_reading():
    source = "import os\na = os.environ.get('X')\nb = os.environ['Y']\nc = os.getenv('Z')\nd = 'W' in os.environ\n" \
             "e = {**os.environ}\nos.environ.setdefault('V', '1')\nos.environ['U'] = '2'\n"
    assert environment_reads(source) == [2, 3, 4, 5]


def test_kinds_parse_and_name_the_variable_when_wrong():
    env = {"L": " a, ,b ", "S": "Yes", "F": "2", "I": "x", "E": "  "}
    assert Setting("L", "list", [], "tests", "").get(env) == ["a", "b"]
    assert Setting("S", "switch", None, "tests", "").get(env) is True
    assert Setting("F", "flag", False, "tests", "").get(env) is False  # only 1/true/yes turn a flag on
    assert Setting("E", "int", 7, "tests", "").get(env) == 7  # empty is unset
    with pytest.raises(ConfigError, match=r"I='x' is not an integer"):
        Setting("I", "int", None, "tests", "").get(env)
    with pytest.raises(ConfigError, match=r"F must be 1 \(or true/yes\) or 0 \(or false/no\), got '2'"):
        Setting("F", "switch", None, "tests", "").get(env)
    with pytest.raises(ValueError, match="kind 'number'"):
        Setting("N", "number", None, "tests", "")


def test_the_project_root_is_the_checkout():
    """include.process.paths finds the checkout from its own place in it."""
    assert os.path.samefile(PROJECT_ROOT, ROOT)
    assert os.path.exists(os.path.join(PROJECT_ROOT, "run.sh"))

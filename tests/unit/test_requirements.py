"""The pinned requirements: one file per command (run.sh), each pin once and equal to
constraints.txt's, the test tools only in the tests' file."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETS = {"runtime": "requirements.txt", "demo": "requirements-demo.txt", "stack": "requirements-stack.txt",
        "test": "requirements-test.txt"}


def _lines(name: str) -> list[str]:
    with open(os.path.join(ROOT, name)) as f:
        return [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]


def _name(spec: str) -> str:
    return re.split(r"[\[=]", spec)[0].lower().replace("_", "-")


def pins(name: str) -> dict[str, str]:
    """A file's own pins, name -> version."""
    return {_name(line): line.split("==")[1] for line in _lines(name) if not line.startswith("-r")}


def closure(name: str) -> dict[str, str]:
    """A file's pins and those of the files it includes (-r)."""
    found = dict(pins(name))
    for line in _lines(name):
        if line.startswith("-r"):
            found.update(closure(line.split()[1]))
    return found


def test_each_pin_once_and_as_constraints_pins_it():
    constraints = {_name(line): line.split("==")[1] for line in _lines("constraints.txt") if "==" in line}
    seen: dict[str, str] = {}
    for file in SETS.values():
        for name, version in pins(file).items():
            assert name not in seen, f"{name} pinned in {seen[name]} and {file}"
            seen[name] = file
            assert constraints.get(name) == version, f"{file}: {name}=={version}, constraints.txt: {constraints.get(name)}"


def test_every_command_installs_its_own_file_and_the_demo_no_test_tool():
    with open(os.path.join(ROOT, "run.sh")) as f:
        run = f.read()
    for command, wanted in (("demo", "demo"), ("stack", "stack"), ("ui", "runtime"), ("test", "test")):
        assert re.search(rf"\n  {command}\)\n    setup {wanted}\n", run), f"./run.sh {command} installs {SETS[wanted]}"
    assert closure("requirements-test.txt").keys() >= {k for f in SETS.values() for k in closure(f)}
    tools = pins("requirements-test.txt").keys()
    for file in ("requirements.txt", "requirements-demo.txt", "requirements-stack.txt"):
        assert not tools & closure(file).keys(), f"{file} installs a test tool"
    assert not {"apache-airflow-providers-celery", "celery", "psycopg2-binary", "moto"} & closure(
        "requirements-demo.txt").keys(), "the demo installs nothing of the production stack"
    with open(os.path.join(ROOT, "docker", "Dockerfile")) as f:
        assert "-r /tmp/iterations/requirements-stack.txt" in f.read(), "the image installs the stack's file"

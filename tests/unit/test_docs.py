"""The pages' code blocks: each one tagged bash, python or json is run by a test that reads it
from the page (tests.docs.block), or marked in the page as not run and why. The blocks that
need nothing but Python are run here; the others where they can run (the test named in
``claims()``'s answer)."""

from __future__ import annotations

import ast
import glob
import json
import os
import re

import pytest

from tests.conftest import ROOT
from tests.docs import RUN_TAGS, block, blocks, pages, parse_python


def claims() -> dict[tuple[str, int], list[str]]:
    """(page, line of the block) -> the test files that read it with ``block(page, start)``."""
    out: dict[tuple[str, int], list[str]] = {}
    for path in glob.glob(os.path.join(ROOT, "tests", "**", "*.py"), recursive=True):
        tree = parse_python(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "block" and len(node.args) == 2 \
                    and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args):
                b = block(node.args[0].value, node.args[1].value)  # raises when the page changed
                out.setdefault((b.page, b.line), []).append(os.path.relpath(path, ROOT))
    return out


def test_every_code_block_is_run_by_a_test_or_marked_as_not_run():
    claimed = claims()
    loose = []
    for page in pages():
        for b in blocks(page):
            if b.tag not in RUN_TAGS:
                assert b.tag == "", f"{page}:{b.line}: a block tagged {b.tag!r}: tag it {'/'.join(RUN_TAGS)} or nothing"
                continue
            runs = claimed.get((page, b.line))
            if runs and b.not_run:
                loose.append(f"{page}:{b.line} is marked as not run, yet {', '.join(runs)} runs it")
            elif not runs and not b.not_run:
                loose.append(f"{page}:{b.line} ({b.text.splitlines()[0][:60]}) is neither run by a test nor marked "
                             "'*Not run by the tests: <why>*' on the line above it")
            elif b.not_run is not None and len(b.not_run.rstrip("*").strip()) < 10:
                loose.append(f"{page}:{b.line} is marked as not run without saying why")
    assert not loose, "\n".join(loose)


def test_the_checks_files_in_data_checks_md_are_accepted_as_written():
    """Both checks files parse, every entry passes the allow-list, and the second names the
    parameter the runtime provides."""
    from include.checks import CheckSettings

    for text in (block("docs/data-checks.md", '{"expectations": [\n  {"name": "no_dominant_node"').text,
                 block("docs/data-checks.md", '{"expectations": [\n  {"name": "enough_nodes"').text):
        settings = CheckSettings.parse(json.loads(text))
        assert [e["name"] for e in settings.expectations] == re.findall(r'"name": "(\w+)"', text)


def test_the_body_guides_fragments_are_the_examples_code():
    """docs/writing-a-body.md shows the example body in fragments (``...`` for what it leaves
    out): every other line is in examples/label-propagation as written there."""
    source = "".join(open(p, encoding="utf-8").read()
                     for p in glob.glob(os.path.join(ROOT, "examples", "label-propagation", "**", "*.py"),
                                        recursive=True))
    lines = {re.sub(r"\s+", " ", line.split("  #")[0]).strip() for line in source.splitlines()}
    fragments = (block("docs/writing-a-body.md", "from dataclasses import dataclass"),
                 block("docs/writing-a-body.md", "class LabelPropagation(IterationBody):"),
                 block("docs/writing-a-body.md", "    def load(self, raw, params"))
    for fragment in fragments:
        for line in fragment.text.splitlines():
            code = re.sub(r"\s+", " ", line.split("  #")[0]).strip()
            if code and code != "...":
                assert code in lines, f"docs/writing-a-body.md shows {code!r}, which the example does not have"


@pytest.mark.parametrize("page", pages())
def test_commands_name_files_that_exist(page):
    """A bash block's ``./run.sh <cmd>`` and ``python -m <module>`` name what the checkout has."""
    known = re.findall(r"^  (\w+)\)", open(os.path.join(ROOT, "run.sh")).read(), re.M)
    for b in blocks(page):
        if b.tag != "bash":
            continue
        for command in b.commands():
            for sub in re.findall(r"\./run\.sh (\w+)", command):
                assert sub in known, f"{page}:{b.line}: ./run.sh {sub} is not a command of run.sh ({known})"
            for module in re.findall(r"python -m ([\w.]+)", command):
                path = os.path.join(ROOT, *module.split("."))
                assert os.path.exists(path + ".py") or os.path.exists(os.path.join(path, "__main__.py")), \
                    f"{page}:{b.line}: python -m {module}: no such module in the checkout"


def test_the_dag_params_the_configuration_page_names_are_ones_a_run_conf_may_set():
    """Issue 64: the JobConfig table said a run's conf sets ``input_format``, a key the closed conf
    refuses. Every param its DAG-param column names (a backticked name with ``_``, not a call) is
    one ``job_params`` declares, so that a conf of those keys passes ``check_conf_keys``."""
    pytest.importorskip("airflow.sdk")
    from include.contract.parameters import check_conf_keys
    from plugins.iterations.dag_factory import job_params

    declared = set(job_params(job_id="j", input_path="/in/e.csv", output_path=None)) | \
        set(job_params(job_id="j", input_path="/in/e.csv", output_path=None, scheduled=True))
    text = open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8").read()
    table = text.split("| `JobConfig` field |", 1)[1].split("\n\n", 1)[0]
    named = set()
    for row in table.splitlines()[2:]:
        cell = row.split(" | ")[3]  # field | default | run_job flag | DAG param | notes
        named |= {n for n in re.findall(r"`([a-z][a-z0-9_]*)`", cell) if "_" in n}
    assert named and not named - declared, f"not params of the DAGs: {sorted(named - declared)}"
    check_conf_keys({k: None for k in named}, declared)

"""The code blocks of README.md and docs/*.md, for the tests that run them.

Every block tagged ``bash``, ``python`` or ``json`` is either run by a test, which reads it from
the page with ``block(page, start)`` (so the test runs what the page says, as it says it), or
marked in the page as not run, by a line just above it that starts with ``*Not run by the
tests:`` and says why. tests/unit/test_docs.py holds every page to that. Blocks without a tag
are output samples, trees and diagrams: nothing to run."""

from __future__ import annotations

import ast
import gc
import glob
import os
import re
from dataclasses import dataclass

from tests.conftest import ROOT

RUN_TAGS = ("bash", "python", "json")
NOT_RUN = "*Not run by the tests:"


@dataclass(frozen=True)
class Block:
    page: str  # relative to the checkout: README.md, docs/airflow.md
    line: int  # of its opening fence
    tag: str
    text: str
    not_run: str | None  # the page's reason, when it marks the block as not run

    def commands(self) -> list[str]:
        """A bash block's commands: one per line (a trailing backslash continues it), each
        without its comment."""
        joined = re.sub(r"\\\n\s*", " ", self.text)
        return [c for line in joined.splitlines() if (c := re.sub(r"(^|\s)#\s.*$", "", line).strip())]


def pages() -> list[str]:
    return ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


def blocks(page: str) -> list[Block]:
    lines = open(os.path.join(ROOT, page), encoding="utf-8").read().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, tag = i, m.group(1)
        i += 1
        body = []
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        above = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        note = above.strip()[len(NOT_RUN):].strip() if above.strip().startswith(NOT_RUN) else None
        out.append(Block(page, start + 1, tag, "\n".join(body) + "\n", note))
        i += 1
    return out


def block(page: str, start: str) -> Block:
    """The one block of ``page`` whose text starts with ``start``; an error naming the page if
    none or several do (the page changed: the test that runs it must follow)."""
    found = [b for b in blocks(page) if b.text.startswith(start)]
    if len(found) != 1:
        raise AssertionError(f"{page}: {len(found)} code blocks start with {start!r}; one was expected")
    return found[0]


def parse_python(path: str) -> ast.Module:
    """The syntax tree of the Python file ``path``, parsed with the garbage collector off: in a
    test worker that ran Spark, a collection during the parse finalizes py4j objects whose
    gateway is gone, and CPython 3.11 then fails the parse with "AST constructor recursion
    depth mismatch" (a SystemError, seen in a CI run)."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()

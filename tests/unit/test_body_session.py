"""What a body brings to a Spark Connect session. Its package (``spark_jobs.session.
body_package``): the top-level package as this process imports it, by content; never the
project's own or the standard library's; a package too large is refused by name
(tests/dags/test_body_package.py runs a UDF body through the server). Its static data's plain
values, handed on to the next process (``spark_jobs.handover.handed_on``)."""

from __future__ import annotations

import importlib
import sys
import zipfile

import pytest

from include.errors import ConfigError
from spark_jobs import session
from spark_jobs.handover import handed_on


@pytest.fixture
def path(tmp_path):
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.split(".")[0] in ("shipped_pkg", "shipped_mod")]:
        del sys.modules[name]


def write_package(root, rule="x // 2"):
    pkg = root / "shipped_pkg"
    (pkg / "sub" / "__pycache__").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("class Body: pass\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "rules.py").write_text(f"def rule(x):\n    return {rule}\n")
    (pkg / "sub" / "__pycache__" / "rules.cpython-311.pyc").write_bytes(b"compiled")
    (pkg / "table.json").write_text("{}")
    return pkg


def test_the_package_is_zipped_by_content(path, tmp_path_factory):
    write_package(path)
    shipped = session.body_package("shipped_pkg.sub:Body")
    assert shipped.name == "shipped_pkg" and shipped.files == 4
    with zipfile.ZipFile(shipped.path) as z:
        assert sorted(z.namelist()) == ["shipped_pkg/__init__.py", "shipped_pkg/sub/__init__.py",
                                        "shipped_pkg/sub/rules.py", "shipped_pkg/table.json"]
        assert z.read("shipped_pkg/sub/rules.py") == b"def rule(x):\n    return x // 2\n"
    first = open(shipped.path, "rb").read()
    assert session.body_package("shipped_pkg:Body") is shipped  # made once per content

    # changed: another artifact, named by the new content
    write_package(path, rule="x // 3")
    changed = session.body_package("shipped_pkg:Body")
    assert changed.path != shipped.path and open(shipped.path, "rb").read() == first

    # the same content elsewhere (another process's copy): the same name and bytes
    write_package(path)
    (path / "shipped_pkg" / "__init__.py").touch()
    again = session.body_package("shipped_pkg:Body")
    assert again is not shipped and again.path == shipped.path and open(again.path, "rb").read() == first


def test_a_module_of_its_own(path):
    (path / "shipped_mod.py").write_text("class Body: pass\n")
    shipped = session.body_package("shipped_mod:Body")
    with zipfile.ZipFile(shipped.path) as z:
        assert z.namelist() == ["shipped_mod.py"]


def test_what_is_not_shipped():
    assert session.body_package("spark_jobs.bodies.pagerank:PageRank") is None  # the project's
    assert session.body_package("json.decoder:JSONDecoder") is None  # the standard library's
    assert session.body_package("math:x") is None  # compiled, not source


def test_a_package_too_large_is_refused_by_name(path, monkeypatch):
    write_package(path)
    monkeypatch.setattr(session, "SHIPPED_PACKAGE_LIMIT", 10)
    with pytest.raises(ConfigError, match=r"the body's package 'shipped_pkg' holds 0\.0 MiB of files, more than the 0 "
                                          r"MiB shipped .* install it where the server's Python runs instead"):
        session.body_package("shipped_pkg:Body")


def test_static_values_handed_on_are_those_json_gives_back():
    for value in (None, True, 3, 2.5, "x", ["f1", "f2"], [], {"a": [1, 2.0, None], "b": {"c": "d"}}):
        assert handed_on(value), value
    for value in (float("nan"), float("inf"), ("f1", "f2"), {1: "a"}, {"a": ("b",)}, object(), b"x",
                  [[[[[[[[[[1]]]]]]]]]]):
        assert not handed_on(value), value

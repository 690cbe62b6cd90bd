"""Locations (include.store): one canonical form at the door, in a grammar no reader
downstream can interpret, under the allowed roots, compared segment by segment."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from include.contract.config import InputSpec, JobConfig
from include.errors import ConfigError
from include.store import AllowedRoots, Location, LocationError, configured_roots, dag_roots, roots_for_dag


@pytest.fixture
def roots(tmp_path):
    (tmp_path / "data").mkdir()
    return AllowedRoots([str(tmp_path / "data"), "s3://good-bucket/jobs"])


@pytest.mark.parametrize("text,canonical", [
    ("/tmp", "/tmp"),
    ("/tmp/", "/tmp"),
    ("file:///tmp", "/tmp"),
    ("s3://bucket-1/a/b", "s3://bucket-1/a/b"),
    ("s3a://bucket-1/a/b/", "s3://bucket-1/a/b"),
    ("S3://bucket-1/k=v/part-0.parquet", "s3://bucket-1/k=v/part-0.parquet"),
    ("s3://bucket-1", "s3://bucket-1"),
])
def test_one_canonical_form(text, canonical):
    assert Location.parse(text).url == canonical
    assert Location.parse(Location.parse(text).url) == Location.parse(text), "the canonical form parses to itself"


@pytest.mark.parametrize("tail,char", [
    ("{..,x}/secret", "'{'"), ("*", "'*'"), ("x?", "'?'"), ("[a-z]/x", "'['"), ("a,b", "','"),
    ("%2e%2e/etc", "'%'"), ("a\\b", "'\\\\'"), ("a#b", "'#'"), ("a:b", "':'"), ("u@x", "'@'"), ("~x", "'~'"),
    ("a b", "a space"), ("x;rm -rf ~", "';'"), ("$(id)", "'$'"), ("`id`", "'`'"), ("a|b", "'|'"),
    ("caf\u00e9", "U+00E9"), ("x\ny", "control character"), ("a+b", "'+'"), ("!x", "'!'"),
])
def test_characters_a_reader_would_interpret_are_refused_by_name(roots, tmp_path, tail, char):
    with pytest.raises(LocationError) as e:
        roots.check("input_path", f"{tmp_path}/data/{tail}")
    assert "input_path" in str(e.value) and char in str(e.value), str(e.value)
    with pytest.raises(LocationError, match="input_path"):
        roots.check("input_path", f"s3://good-bucket/jobs/{tail}")


@pytest.mark.parametrize("path,says", [
    ("{root}/data/../../etc/passwd", "'..' segment"),
    ("{root}/data/./x", "'.' segment"),
    ("{root}/data//x", "empty segment"),
    ("/etc/passwd", "outside the allowed roots"),
    ("relative/edges.csv", "must be an absolute path"),
    ("--conf spark.driver.extraJavaOptions=-Dx=1", "looks like a command-line option"),
    ("file://host/etc/passwd", "file:///absolute/path"),
    ("hdfs://nn/x", "only absolute local paths, file:/// and s3:// URLs"),
    ("s3://other-bucket/jobs/x", "outside the allowed roots"),
    ("s3://good-bucket/jobsX/x", "outside the allowed roots"),
    ("s3://good-bucket/jobs/../x", "'..' segment"),
    ("s3://good-bucket/jobs//x", "empty segment"),
    ("s3://key:secret@good-bucket/jobs/x", "not an S3 bucket name"),
    ("s3://good-bucket:9000/jobs/x", "not an S3 bucket name"),
    ("s3://Bad_Bucket/jobs/x", "not an S3 bucket name"),
    ("", "non-empty string"),
    (" {root}/data/x", "white space"),
])
def test_locations_elsewhere_are_refused_naming_the_value(roots, tmp_path, path, says):
    path = path.replace("{root}", str(tmp_path))
    with pytest.raises(ConfigError) as e:
        roots.check("checkpoint_root", path)
    assert says in str(e.value) and "checkpoint_root" in str(e.value), str(e.value)


def test_a_symlink_is_resolved_and_its_target_checked(roots, tmp_path):
    os.symlink("/etc", tmp_path / "data" / "escape")
    with pytest.raises(LocationError, match="resolved '/etc/passwd'"):
        roots.check("input_path", f"{tmp_path}/data/escape/passwd")
    (tmp_path / "data" / "real").mkdir()
    os.symlink(tmp_path / "data" / "real", tmp_path / "data" / "link")
    assert roots.check("input_path", f"{tmp_path}/data/link/x.csv") == f"{tmp_path}/data/real/x.csv"


def test_prefixes_that_share_a_stem_are_different_places():
    ckpt, ckpt2 = Location.parse("s3://b-1/ckpt"), Location.parse("s3://b-1/ckpt2")
    assert not ckpt.contains(ckpt2) and not ckpt.overlaps(ckpt2)
    assert ckpt.contains(Location.parse("s3a://b-1/ckpt/jobs/x")) and Location.parse("s3://b-1").contains(ckpt)
    assert not Location.parse("/a/b").overlaps(Location.parse("/a/bc"))
    assert not Location.parse("/a").overlaps(Location.parse("s3://aaa/a"))


def test_the_deployment_adds_roots(monkeypatch, tmp_path):
    monkeypatch.setenv("ITERATIONS_ALLOWED_ROOTS", f"{tmp_path}/more,s3://extra-bucket")
    roots = AllowedRoots.for_dag([f"{tmp_path}/data"])
    assert roots.check("output_path", f"{tmp_path}/more/x") and roots.check("output_path", "s3://extra-bucket/any/x")
    with pytest.raises(ConfigError, match="outside"):
        roots.check("output_path", "s3://other-bucket/x")


def test_roots_from_the_params_defaults():
    assert configured_roots({"input_path": "/d/in/edges.csv", "output_path": "/d/out", "checkpoint_root": None}) == [
        "/d/in", "/d/out"]
    assert configured_roots({"input_path": "s3://bbb/in/edges.csv"}) == ["s3://bbb/in"]
    assert configured_roots({"input_path": "s3://bbb/edges.csv"}) == ["s3://bbb"]
    assert configured_roots({"input_path": "/d/in/{date}/edges.csv"}) == ["/d/in"], "a scheduled input's dates"
    assert dag_roots({"checkpoint_root": "s3://bbb/ckpt"}) == ["s3://bbb/ckpt"], "the local directory is no DAG's"


def test_a_dag_reads_and_writes_only_under_its_own_roots_naming_whose_a_refused_place_is(tmp_path, monkeypatch):
    """Two DAGs with their defaults under one local directory: a run of one can name neither the
    other's input nor its published output nor its output location, and the refusal says whose
    place it is; its own places are admitted. The Iterations view applies the same roots."""
    from include.publication.output_owners import OutputOwner, claim_output
    from include.store import LocalStore
    from include.store.door import admit_run

    monkeypatch.delenv("ITERATIONS_ALLOWED_ROOTS", raising=False)
    local = tmp_path / "local"  # (defaults in one directory, as a DAG author may write them)
    pagerank = {"input_path": str(local / "graphs" / "edges.parquet"), "checkpoint_root": str(local / "store"),
                "output_path": str(local / "output" / "pagerank")}
    kmeans = {"input_path": str(local / "points" / "points.parquet"), "checkpoint_root": str(local / "store"),
              "output_path": str(local / "output" / "kmeans")}
    ranks = local / "output" / "pagerank" / "pr"
    claim_output(LocalStore(ranks), OutputOwner(store=str(local / "store"), job_id="pr", dag_id="iterate_pagerank",
                                                body="pagerank"))
    roots = roots_for_dag(kmeans)
    run = {"job_id": "km", **kmeans}
    assert admit_run(run, roots)["output_path"] == str(local / "output" / "kmeans")
    with pytest.raises(LocationError) as refused:
        admit_run({**run, "input_path": str(ranks / "ranks")}, roots)
    assert "outside the allowed roots" in str(refused.value)
    assert f"it is the output location {ranks} of job pr of the store {local / 'store'} (DAG iterate_pagerank" in \
        str(refused.value)
    with pytest.raises(LocationError, match="input_path .*edges.parquet.* is outside the allowed roots"):
        admit_run({**run, "input_path": pagerank["input_path"]}, roots)
    with pytest.raises(LocationError, match="output_path .*output/pagerank.* is outside the allowed roots"):
        admit_run({**run, "output_path": pagerank["output_path"]}, roots)


def test_a_dags_own_directory_is_reached_only_through_a_root_inside_it(monkeypatch, tmp_path):
    """``<local>/dags/<dag_id>`` (include.store.dag_directory): a wider root (the local
    directory, here the deployment's) admits places beside the DAGs' directories but none inside
    one, nor the DAGs' directory itself; a root inside a DAG's directory (its own defaults, an
    author's declared input, a deployer's root naming it) admits what is under it; the stop DAG
    and the unchecked view reach across (``across_dags``)."""
    import include.store.roots as roots_module
    from include.store import dag_directory

    local = tmp_path / "local"
    monkeypatch.setattr(roots_module, "DAGS_DIR", str(local / "dags"))
    monkeypatch.setenv("ITERATIONS_ALLOWED_ROOTS", str(local))
    own, other = str(local / "dags" / "a"), str(local / "dags" / "b")
    roots = AllowedRoots.for_dag([f"{own}/store", f"{own}/output", f"{other}/output/shared"])
    assert roots.check("output_path", f"{own}/output/job") == f"{own}/output/job"
    assert roots.check("input_path", str(local / "demo" / "edges.csv")) == str(local / "demo" / "edges.csv")
    assert roots.check("input_path", f"{other}/output/shared/ranks") == f"{other}/output/shared/ranks"
    for value in (f"{other}/store", f"{other}/output/mine", f"{own}/elsewhere"):
        with pytest.raises(LocationError, match=r"lies in DAG (a|b)'s own directory .*: only that DAG's runs reach it"):
            roots.check("output_path", value)
    with pytest.raises(LocationError, match="is the directory of every DAG's own directory"):
        roots.check("checkpoint_root", str(local / "dags"))
    assert AllowedRoots([str(local)], across_dags=True).check("checkpoint_root", f"{other}/store") == f"{other}/store"
    monkeypatch.setenv("ITERATIONS_ALLOWED_ROOTS", f"{other}/store")  # the deployer names it
    assert AllowedRoots.for_dag([]).check("checkpoint_root", f"{other}/store/x") == f"{other}/store/x"
    with pytest.raises(ConfigError, match="invalid dag_id '../x'"):
        dag_directory("../x")


def test_a_job_of_the_shared_store_of_earlier_versions_is_named(monkeypatch, tmp_path):
    import include.store.roots as roots_module
    from include.store import earlier_shared_job

    shared = tmp_path / "store"
    monkeypatch.setattr(roots_module, "SHARED_STORE", str(shared))
    own = tmp_path / "dags" / "a" / "store"
    assert earlier_shared_job("pr", str(own)) is None, "no such job there"
    (shared / "jobs" / "pr").mkdir(parents=True)
    said = earlier_shared_job("pr", str(own))
    assert said.startswith(f"job pr starts anew in {own}: the shared store {shared} of earlier versions holds")
    assert "ITERATIONS_ALLOWED_ROOTS" in said and f"checkpoint_root={shared}" in said
    assert earlier_shared_job("pr", str(shared)) is None, "the run goes on with it"
    (own / "jobs" / "pr").mkdir(parents=True)
    assert earlier_shared_job("pr", str(own)) is None, "the job is the DAG's own already"
    assert earlier_shared_job("pr", "s3://bucket/store") is None


def test_a_job_config_holds_canonical_locations(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = JobConfig(job_id="j", body="pagerank", input="in/edges.csv", checkpoint_root="s3a://bbb/ckpt/",
                       output_path="file://" + str(tmp_path / "out"))
    assert config.input.path == str(tmp_path / "in" / "edges.csv"), "a library caller's relative path: from the cwd"
    assert (config.checkpoint_root, config.output_path) == ("s3://bbb/ckpt", str(tmp_path / "out"))
    assert config.input.location == Location("file", "", str(tmp_path / "in" / "edges.csv"))
    with pytest.raises(LocationError, match="'\\*'"):
        InputSpec(str(tmp_path / "in" / "*.csv"))
    with pytest.raises(ConfigError, match="overlaps the checkpoint root"):
        JobConfig(job_id="j", body="pagerank", input="/in/e.csv", checkpoint_root="s3://bbb/ckpt",
                  output_path="s3a://bbb/ckpt/out")


_SEGMENT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(_SEGMENT, min_size=1, max_size=4))
def test_whatever_is_admitted_is_in_the_grammar_and_under_the_root(segments):
    """Any text after an allowed root: refused, or admitted as a location under the root
    whose every character is one of the grammar's (nothing left for a reader to expand)."""
    roots = AllowedRoots(["/srv/allowed", "s3://good-bucket/jobs"])
    for prefix in ("/srv/allowed/", "s3://good-bucket/jobs/", "s3a://good-bucket/jobs/"):
        text = prefix + "/".join(segments)
        try:
            location = roots.admit("input_path", text)
        except LocationError:
            continue
        assert roots.allows(location)
        assert all(c.isascii() and (c.isalnum() or c in "._-=/") for c in location.path), location
        assert ".." not in location.segments and "" not in location.segments
        assert Location.parse(location.url) == location

"""Where a DAG run's paths may point (include.paths): under the configured roots, resolved."""

from __future__ import annotations

import os

import pytest

from include.errors import ConfigError
from include.paths import PathPolicy, configured_roots


@pytest.fixture
def policy(tmp_path):
    (tmp_path / "data").mkdir()
    return PathPolicy([str(tmp_path / "data"), "s3://good-bucket/jobs"])


@pytest.mark.parametrize("tail", ["x.csv", "sub/dir/", "a;rm -rf ~", "$(id)", "`id`", "a b|c&d>e"])
def test_paths_under_a_root_are_accepted_as_given(policy, tmp_path, tail):
    path = f"{tmp_path}/data/{tail}"
    assert policy.check("input_path", path) == path  # metacharacters are just characters of a name


@pytest.mark.parametrize("path,says", [
    ("{root}/data/../../etc/passwd", "outside the allowed roots"),
    ("/etc/passwd", "outside the allowed roots"),
    ("relative/edges.csv", "must be an absolute path"),
    ("--conf spark.driver.extraJavaOptions=-Dx=1", "looks like a command-line option"),
    ("{root}/data/x\n--conf a=b", "control characters"),
    ("file:///etc/passwd", "only local paths and s3:// URLs"),
    ("hdfs://nn/x", "only local paths and s3:// URLs"),
    ("s3://other-bucket/jobs/x", "outside the allowed roots"),
    ("s3://good-bucket/jobsX/x", "outside the allowed roots"),
    ("s3://good-bucket/jobs/../x", "'..'"),
    ("s3://good-bucket/jobs//x", "empty segments"),
    ("s3://key:secret@good-bucket/jobs/x", "without user"),
    ("s3://Bad_Bucket/jobs/x", "not a valid bucket name"),
    ("", "non-empty string"),
])
def test_paths_elsewhere_are_refused_naming_the_value(policy, tmp_path, path, says):
    path = path.replace("{root}", str(tmp_path))
    with pytest.raises(ConfigError) as e:
        policy.check("checkpoint_root", path)
    assert says in str(e.value) and "checkpoint_root" in str(e.value)


def test_a_symlink_out_of_a_root_is_refused(policy, tmp_path):
    os.symlink("/etc", tmp_path / "data" / "escape")
    with pytest.raises(ConfigError, match="resolved '/etc/passwd'"):
        policy.check("input_path", f"{tmp_path}/data/escape/passwd")


def test_the_deployment_adds_roots(monkeypatch, tmp_path):
    monkeypatch.setenv("ITERATIONS_ALLOWED_ROOTS", f"{tmp_path}/more,s3://extra-bucket")
    policy = PathPolicy.for_dag([f"{tmp_path}/data"])
    assert policy.check("output_path", f"{tmp_path}/more/x") and policy.check("output_path", "s3://extra-bucket/any/x")
    with pytest.raises(ConfigError, match="outside"):
        policy.check("output_path", "s3://other-bucket/x")


def test_roots_from_the_params_defaults():
    assert configured_roots({"input_path": "/d/in/edges.csv", "output_path": "/d/out", "checkpoint_root": None}) == [
        "/d/in", "/d/out"]
    assert configured_roots({"input_path": "s3://b/in/edges.csv"}) == ["s3://b/in"]
    assert configured_roots({"input_path": "s3://b/edges.csv"}) == ["s3://b"]

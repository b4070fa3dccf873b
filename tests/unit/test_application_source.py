"""``application`` as a URI: where a user script comes from (a path on a host, ``local:``/``file:``, or a URI
Spark fetches), the spec's check of it, and what each target's plan makes of it (a fetched script travels as
a ``files`` entry: spark-submit's ``--files``, the standalone REST submission's ``spark.files``; YARN runs it
from the container's working directory without shipping it twice)."""

from __future__ import annotations

import pytest

from airflow_streaming.application_source import (
    checked_if_local,
    driver_argument,
    is_fetched,
    local_path,
    script_file,
)
from airflow_streaming.compat.run import check_command
from airflow_streaming.exceptions import ApplicationNotFoundError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import SpecError, StreamSpec
from airflow_streaming.submit_fields import shipped_files, spark_properties
from airflow_streaming.targets.submit_command import spark_submit_argv

URI = "https://artifacts.example.com/team/job.py"


def spec(tmp_path, application: str, **fields) -> StreamSpec:
    return StreamSpec(name="remote", application=application, checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "ctl"), **fields)


# --------------------------------------------------------------------------- the pure module

@pytest.mark.parametrize("app, fetched", [
    ("/opt/job.py", False), ("file:/opt/job.py", False), ("file:///opt/job.py", False),
    ("local:/opt/job.py", False), ("local:///opt/job.py", False), ("job.py", False),
    ("hdfs://nn:8020/jobs/job.py", True), ("s3a://bucket/jobs/job.py", True), (URI, True),
    ("http://127.0.0.1:8000/job.py", True), ("gs://b/job.py", True),
])
def test_is_fetched(app, fetched):
    assert is_fetched(app) is fetched


@pytest.mark.parametrize("app, path", [
    ("/opt/job.py", "/opt/job.py"), ("file:/opt/job.py", "/opt/job.py"), ("file:///opt/job.py", "/opt/job.py"),
    ("file://localhost/opt/job.py", "/opt/job.py"), ("local:/opt/job.py", "/opt/job.py"),
    ("local:///opt/job.py", "/opt/job.py"), ("job.py", "job.py"),
])
def test_local_path_strips_file_and_local(app, path):
    assert local_path(app) == path


def test_a_fetched_uri_has_no_local_path():
    with pytest.raises(ValueError, match="a URI Spark fetches"):
        local_path(URI)


@pytest.mark.parametrize("app, told", [
    ("/opt/job.py", "/opt/job.py"), ("file:///opt/job.py", "/opt/job.py"),  # a submitting host's file
    ("local:/opt/job.py", "local:/opt/job.py"),  # on the driver's host: no target ships it
    (URI, URI), ("s3a://bucket/jobs/job.py", "s3a://bucket/jobs/job.py"),
])
def test_driver_argument(app, told):
    assert driver_argument(app) == told


def test_script_file_of_a_path_is_the_path_checked(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("pass\n")
    for app in (str(script), f"file:{script}", f"file://{script}", f"local:{script}"):
        assert script_file(app) == str(script) == checked_if_local(app)
    with pytest.raises(FileNotFoundError, match=f"application script {tmp_path}/gone.py does not exist"):
        script_file(f"local:{tmp_path}/gone.py")


def test_script_file_of_a_uri_without_a_spark_context_names_the_uri():
    assert checked_if_local(URI) == URI  # nothing to check before the SparkContext fetched it
    with pytest.raises(FileNotFoundError, match=f"application script {URI} was not fetched"):
        script_file(URI)


# --------------------------------------------------------------------------- the spec

@pytest.mark.parametrize("app", [
    "hdfs://nn:8020/jobs/job.py", "s3a://bucket/jobs/job.py", URI, "http://127.0.0.1:8000/job.py",
    "local:/opt/job.py", "local:///opt/job.py", "file:/opt/job.py", "file:///opt/job.py", "/opt/job.py",
    "abfss://c@acct.dfs.core.windows.net/job.py", "gs://b/j/job.py",
])
def test_accepted_applications(tmp_path, app):
    assert spec(tmp_path, app).application == app


@pytest.mark.parametrize("app, words", [
    ("ftp://host/job.py", "URI scheme 'ftp' is not one Spark fetches"),
    ("hdfs:/jobs/job.py", "must be hdfs://<host or bucket>/<path>"),
    ("local:jobs/job.py", "a local: URI must name an absolute path"),
    ("jobs/job.py", "not an absolute path to a .py file nor a URI of one"),
    ("hdfs://nn/jobs/job.sh", "not an absolute path to a .py file nor a URI of one"),
    ("s3a://bucket/jobs/", "not an absolute path to a .py file"),
    ("https://h/job.py#other.py", "'#name' suffix"),
    ("https://h/a,b.py", "must not contain commas"),
])
def test_refused_applications_name_the_field(tmp_path, app, words):
    with pytest.raises(SpecError) as caught:
        spec(tmp_path, app)
    assert caught.value.field == "application" and words in caught.value.message


def test_a_fetched_application_may_not_share_its_name_with_another_shipped_file(tmp_path):
    with pytest.raises(SpecError) as caught:
        spec(tmp_path, URI, py_files=["hdfs://nn/libs/job.py"])
    assert caught.value.field == "application" and "same file name 'job.py'" in caught.value.message
    with pytest.raises(SpecError, match="same file name"):
        spec(tmp_path, URI, files=["/opt/other.py#job.py"])
    assert spec(tmp_path, URI, files=[URI]).files == (URI,)  # the same URI listed twice is one file


def test_submit_args_passing_files_clash_with_a_fetched_application(tmp_path):
    with pytest.raises(SpecError, match="cluster.submit_args also passes --files"):
        spec(tmp_path, URI, cluster={"submit_args": ["--files", "/x.csv"]})


def test_shipped_files_add_a_fetched_application_once(tmp_path):
    assert shipped_files(spec(tmp_path, URI, files=["/opt/a.csv"])) == ("/opt/a.csv", URI)
    assert shipped_files(spec(tmp_path, URI, files=[URI])) == (URI,)
    for app in ("/opt/job.py", "local:/opt/job.py", "file:/opt/job.py", "events_etl"):
        assert shipped_files(spec(tmp_path, app, files=["/opt/a.csv"])) == ("/opt/a.csv",)


# --------------------------------------------------------------------------- the plans

def test_local_target_ships_a_fetched_application_in_files_and_does_not_look_for_it(tmp_path):
    hook = SparkStreamHook(spec(tmp_path, URI, master="local[2]", files=["/opt/a.csv"],
                                py_files=["http://h/lib/helper.py"]))
    argv = spark_submit_argv(hook.launch_plan("r1"))
    assert argv[argv.index("--files") + 1] == f"/opt/a.csv,{URI}"
    assert argv[argv.index("--script") + 1] == URI
    assert argv.count("--files") == 1


def test_local_target_checks_a_file_and_a_local_uri_on_this_host(tmp_path):
    script = tmp_path / "job.py"
    for app in (f"file://{script}", f"local:{script}", str(script)):
        with pytest.raises(ApplicationNotFoundError, match=f"application file {script} does not exist"):
            SparkStreamHook(spec(tmp_path, app, master="local[2]")).application_argument()
    script.write_text("pass\n")
    local = {"master": "local[2]"}
    assert SparkStreamHook(spec(tmp_path, f"file://{script}", **local)).application_argument() == \
        ["--script", str(script)]
    assert SparkStreamHook(spec(tmp_path, f"local:{script}", **local)).application_argument() == \
        ["--script", f"local:{script}"]
    argv = spark_submit_argv(SparkStreamHook(spec(tmp_path, f"local:{script}", **local)).launch_plan("r1"))
    assert "--files" not in argv


def test_standalone_rest_conf_carries_a_fetched_application_in_spark_files(tmp_path):
    s = spec(tmp_path, URI, master="spark://m1:7077", deploy_mode="cluster", py_files=["hdfs://nn/lib/helper.py"])
    hook = SparkStreamHook(s)
    plan = hook.launch_plan("r1")
    props = hook.target.request_body(plan)["sparkProperties"]
    assert props["spark.files"] == f"{URI},hdfs://nn/lib/helper.py"
    assert plan.runtime_args[plan.runtime_args.index("--script") + 1] == URI
    assert spark_properties(s)["spark.files"] == props["spark.files"]


def test_yarn_runs_a_fetched_application_from_files_without_shipping_it_twice(tmp_path):
    s = spec(tmp_path, URI, master="yarn", deploy_mode="cluster",
             cluster={"resourcemanager_url": "http://rm:8088"})
    plan = SparkStreamHook(s).launch_plan("r1")
    argv = spark_submit_argv(plan)
    assert argv[argv.index("--files") + 1] == URI
    assert "spark.yarn.dist.files" not in plan.conf  # --files is spark.yarn.dist.files on YARN: once
    assert plan.runtime_args[plan.runtime_args.index("--script") + 1] == "job.py"  # localized in the cwd


def test_yarn_still_ships_a_submitting_hosts_script_and_leaves_a_local_uri(tmp_path):
    yarn = {"master": "yarn", "deploy_mode": "cluster", "cluster": {"resourcemanager_url": "http://rm:8088"}}
    plan = SparkStreamHook(spec(tmp_path, "/opt/team/job.py", **yarn)).launch_plan("r1")
    assert plan.conf["spark.yarn.dist.files"] == "/opt/team/job.py"
    assert plan.runtime_args[plan.runtime_args.index("--script") + 1] == "job.py"
    plan = SparkStreamHook(spec(tmp_path, "local:/opt/team/job.py", **yarn)).launch_plan("r1")
    assert "spark.yarn.dist.files" not in plan.conf
    assert plan.runtime_args[plan.runtime_args.index("--script") + 1] == "local:/opt/team/job.py"


def test_the_compatibility_check_session_fetches_a_fetched_application(tmp_path):
    argv, _ = check_command(spec(tmp_path, URI, files=["file:/opt/a.csv"]), allow_warnings=False)
    confs = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "--conf")
    assert confs["spark.files"] == f"/opt/a.csv,{URI}"
    assert argv[argv.index("--application") + 1] == URI

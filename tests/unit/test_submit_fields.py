"""The spec's SparkSubmitOperator fields: validation, what each target makes of them (compared with what the
Spark provider's SparkSubmitHook builds for the same inputs), refusals naming the field and the target, and
the fields travelling with each version through the stored specs (a rollback runs v1 with v1's files)."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest

from airflow_streaming.control.contract import HISTORY_NAME, ControlPaths
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.lifecycle.record import Action
from airflow_streaming.lifecycle.stored import restart_spec
from airflow_streaming.redaction import MASK, mask_spec, restore_secrets
from airflow_streaming.sealing import sealed
from airflow_streaming.spec import SpecError, StreamSpec
from airflow_streaming.submit_fields import SUBMIT_FLAGS
from airflow_streaming.targets.local import LocalTarget
from airflow_streaming.targets.standalone import StandaloneClusterTarget
from airflow_streaming.targets.submit_command import spark_submit_argv, submitted_properties
from airflow_streaming.targets.yarn import YarnClusterTarget

DEPS = {
    "py_files": "/opt/job/helpers.zip,hdfs://nn:8020/libs/extra.py",
    "files": ["/opt/job/lookup.csv", "s3a://bucket/conf/app.json#app.json"],
    "archives": ["hdfs://nn:8020/envs/venv.tar.gz#venv"],
    "jars": ["local:///opt/spark/jars/udfs.jar"],
    "packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0",
    "exclude_packages": ["org.slf4j:slf4j-api"],
    "repositories": ["https://repo.example.com/maven"],
    "executor_memory": "4g",
    "executor_cores": 2,
    "driver_memory": "2g",
    "env_vars": {"JOB_MODE": "strict", "RETRIES": 3},
}


def spec(tmp_path, **fields) -> StreamSpec:
    return StreamSpec(name="deps", application="/opt/job/main.py", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "control"), **fields)


def error(tmp_path, **fields) -> SpecError:
    with pytest.raises(SpecError) as caught:
        spec(tmp_path, **fields)
    return caught.value


# --------------------------------------------------------------------------- validation

def test_lists_or_comma_separated_strings_are_stored_as_lists_and_round_trip(tmp_path):
    s = spec(tmp_path, **DEPS)
    assert s.py_files == ("/opt/job/helpers.zip", "hdfs://nn:8020/libs/extra.py")
    assert s.packages == ("org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0",)
    assert s.env_vars == {"JOB_MODE": "strict", "RETRIES": "3"}
    stored = s.to_dict()
    assert stored["py_files"] == list(s.py_files) and stored["env_vars"] == dict(s.env_vars)
    assert StreamSpec.from_dict(json.loads(json.dumps(stored))) == s
    # A spec without them stores exactly what it stored before the fields existed.
    assert not {"py_files", "env_vars", "queue", "driver_memory"} & set(spec(tmp_path).to_dict())


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"py_files": ["/opt/a.py", "helpers.zip"]}, "py_files[1]", "absolute local path or a URI"),
    ({"files": "/a.csv, ftp://host/b.csv"}, "files[1]", "scheme 'ftp'"),
    ({"jars": ["local:relative.jar"]}, "jars[0]", "absolute path"),
    ({"py_files": ["/opt/a.py#b.py"]}, "py_files[0]", "'#name' suffix"),
    ({"archives": ["hdfs:/no-host.zip"]}, "archives[0]", "hdfs://"),
    ({"py_files": [3]}, "py_files[0]", "non-empty string"),
    ({"packages": ["spark-sql-kafka"]}, "packages[0]", "group:artifact:version"),
    ({"exclude_packages": "a:b:c"}, "exclude_packages[0]", "group:artifact"),
    ({"repositories": ["repo.example.com"]}, "repositories[0]", "repository URL"),
    ({"driver_memory": "lots"}, "driver_memory", "JVM memory size"),
    ({"executor_cores": 0}, "executor_cores", "positive integer"),
    ({"num_executors": True}, "num_executors", "positive integer"),
    ({"env_vars": {"BAD-NAME": "x"}}, "env_vars", "environment variable names"),
    ({"env_vars": {"A": ["x"]}}, "env_vars.A", "string, number or boolean"),
    ({"properties_file": "spark.conf"}, "properties_file", "absolute path"),
    ({"queue": " "}, "queue", "non-empty"),
])
def test_a_bad_entry_is_named(tmp_path, fields, field, words):
    err = error(tmp_path, **fields)
    assert err.field == field and words in err.message


def test_remote_uris_are_accepted(tmp_path):
    s = spec(tmp_path, py_files=["local:///opt/a.py", "file:///opt/b.zip", "s3a://b/c.zip", "https://h/d.py",
                                 "hdfs://nn/e.egg"])
    assert len(s.py_files) == 5


def test_a_field_and_its_cluster_twin_must_agree(tmp_path):
    err = error(tmp_path, queue="etl", cluster={"queue": "adhoc"})
    assert err.field == "queue" and "cluster.queue" in err.message and "'adhoc'" in err.message
    err = error(tmp_path, driver_memory="2g", cluster={"driver_memory": "4g"})
    assert "cluster.driver_memory" in err.message
    err = error(tmp_path, archives=["/a.zip"], cluster={"archives": ["/b.zip"]})
    assert err.field == "archives" and "cluster.archives" in err.message
    assert spec(tmp_path, queue="etl", cluster={"queue": "etl"}).queue == "etl"  # the same: fine
    err = error(tmp_path, jars=["/a.jar"], cluster={"submit_args": ["--jars", "/b.jar"]})
    assert err.field == "jars" and "cluster.submit_args" in err.message and "--jars" in err.message


@pytest.mark.parametrize(("fields", "master", "mode", "field", "target"), [
    ({"num_executors": 2}, "spark://m:7077", "cluster", "num_executors", "standalone-cluster"),
    ({"num_executors": 2}, "local[2]", None, "num_executors", "local"),
    ({"total_executor_cores": 4}, "yarn", "cluster", "total_executor_cores", "yarn"),
    ({"queue": "etl"}, "k8s://https://api:6443", "cluster", "queue", "kubernetes"),
    ({"queue": "etl"}, "spark://m:7077", None, "queue", "local"),
    ({"properties_file": "/etc/spark/job.conf"}, "spark://m:7077", "cluster", "properties_file",
     "standalone-cluster"),
])
def test_what_a_target_cannot_honour_is_refused_naming_field_and_target(tmp_path, fields, master, mode, field,
                                                                        target):
    err = error(tmp_path, master=master, deploy_mode=mode, **fields)
    assert err.field == field and f"{target} target" in err.message and master in err.message


def test_without_a_master_the_refusal_comes_when_the_target_is_known(tmp_path):
    s = spec(tmp_path, num_executors=3)  # the Spark connection will say where: no refusal yet
    with pytest.raises(SpecError, match="num_executors: .*standalone-cluster target"):
        dataclasses.replace(s, master="spark://m:7077", deploy_mode="cluster")  # how the hook resolves it
    target = LocalTarget(LocalStorage(), ControlPaths(str(tmp_path / "control" / "deps")))
    stand_in = types.SimpleNamespace(**{**{f.name: getattr(s, f.name) for f in dataclasses.fields(s)},
                                        "master": "local[2]"})
    with pytest.raises(SpecError, match="num_executors: .*local target"):
        target.plan(stand_in, "r1", "/l/launch.py", [], {}, {}, str(tmp_path / "log"))
    assert dataclasses.replace(s, master="yarn").num_executors == 3


# --------------------------------------------------------------------------- what SparkSubmitHook builds

def hook_command(monkeypatch, master: str, deploy_mode: str | None, **kwargs) -> tuple[list[str], object]:
    """SparkSubmitHook's spark-submit command for the same inputs, with a stand-in connection."""
    from airflow.models.connection import Connection
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    extra = json.dumps({"deploy-mode": deploy_mode} if deploy_mode else {})
    conn = Connection(conn_id="spark_x", conn_type="spark", host=master, extra=extra)
    monkeypatch.setattr(SparkSubmitHook, "get_connection", classmethod(lambda cls, conn_id: conn))
    hook = SparkSubmitHook(conn_id="spark_x", **kwargs)
    return hook._build_spark_submit_command("/opt/job/main.py"), hook


def operator_kwargs(fields: dict) -> dict:
    """The spec fields as SparkSubmitOperator takes them (comma-separated strings; ``yarn_queue``)."""
    result = {}
    for name, value in fields.items():
        key = "yarn_queue" if name == "queue" else name
        result[key] = ",".join(value) if isinstance(value, (list, tuple)) else value
    return result


def options(argv: list[str]) -> dict[str, str]:
    """The dependency and resource options of a spark-submit command line."""
    flags = set(SUBMIT_FLAGS.values())
    return {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i] in flags}


def test_local_argv_matches_spark_submit_hook(tmp_path, monkeypatch):
    s = spec(tmp_path, master="local[2]", **DEPS)
    target = LocalTarget(LocalStorage(), ControlPaths(str(tmp_path / "control" / "deps")))
    plan = target.plan(s, "r1", "/l/launch.py", ["--script", s.application], {}, {}, str(tmp_path / "log"))
    ours = spark_submit_argv(plan)
    theirs, hook = hook_command(monkeypatch, "local[2]", None, **operator_kwargs({k: getattr(s, k) for k in DEPS}))
    assert options(ours) == options(theirs)
    assert ours.count("--py-files") == 1
    assert plan.env == hook._env == {"JOB_MODE": "strict", "RETRIES": "3"}  # the driver process's environment


def test_yarn_cluster_argv_matches_spark_submit_hook(tmp_path, monkeypatch):
    fields = {**DEPS, "queue": "etl", "num_executors": 4}
    s = spec(tmp_path, master="yarn", deploy_mode="cluster", cluster={"resourcemanager_url": "http://rm:8088"},
             **fields)
    target = YarnClusterTarget(LocalStorage(), ControlPaths(str(tmp_path / "control" / "deps")), dict(s.cluster))
    plan = target.plan(s, "r1", "/l/launch.py", ["--script", s.application], {}, {}, str(tmp_path / "log"))
    ours = spark_submit_argv(plan)
    theirs, _ = hook_command(monkeypatch, "yarn", "cluster", **operator_kwargs({k: getattr(s, k) for k in fields}))
    mine, hooks = options(ours), options(theirs)
    # The driver runtime's zip goes first in the one --py-files; the queue is also spark.yarn.queue.
    assert mine.pop("--py-files").split(",")[1:] == hooks.pop("--py-files").split(",")
    assert plan.conf["spark.yarn.queue"] == "etl"
    assert mine == hooks
    for name, value in s.env_vars.items():
        assert f"spark.yarn.appMasterEnv.{name}={value}" in theirs and f"spark.yarn.appMasterEnv.{name}={value}" in ours


def test_yarn_env_var_holding_a_secret_never_reaches_the_command_line(tmp_path):
    s = spec(tmp_path, master="yarn", deploy_mode="cluster", cluster={"resourcemanager_url": "http://rm:8088"},
             env_vars={"DB_PASSWORD": "hunter2-very-secret", "MODE": "x"})
    target = YarnClusterTarget(LocalStorage(), ControlPaths(str(tmp_path / "control" / "deps")), dict(s.cluster))
    plan = target.plan(s, "r1", "/l/launch.py", [], {}, {}, str(tmp_path / "log"))
    argv = spark_submit_argv(plan, properties_file="/private/p.properties")
    assert "hunter2-very-secret" not in " ".join(argv) and "spark.yarn.appMasterEnv.MODE=x" in argv
    assert plan.secret_conf["spark.yarn.appMasterEnv.DB_PASSWORD"] == "hunter2-very-secret"
    # ...and it is masked in every stored spec, and restored from the caller's spec.
    stored = mask_spec(s.to_dict())
    assert stored["env_vars"] == {"DB_PASSWORD": MASK, "MODE": "x"}
    assert StreamSpec.from_dict(restore_secrets(stored, s)) == s


def test_standalone_rest_body_carries_the_fields_as_spark_properties(tmp_path):
    fields = {**DEPS, "total_executor_cores": 6}
    s = spec(tmp_path, master="spark://m:7077", deploy_mode="cluster", **fields)
    target = StandaloneClusterTarget(LocalStorage(), ControlPaths(str(tmp_path / "control" / "deps")), {},
                                     master="spark://m:7077")
    plan = target.plan(s, "r1", "/l/launch.py", ["--script", s.application], {"spark.jars": "/x.jar"}, {},
                       str(tmp_path / "log"))
    body = target.request_body(plan)
    props = body["sparkProperties"]
    assert props["spark.submit.pyFiles"] == "/opt/job/helpers.zip,hdfs://nn:8020/libs/extra.py"
    assert props["spark.files"] == ("/opt/job/lookup.csv,s3a://bucket/conf/app.json#app.json,"
                                    "/opt/job/helpers.zip,hdfs://nn:8020/libs/extra.py")
    assert props["spark.archives"] == "hdfs://nn:8020/envs/venv.tar.gz#venv"
    assert props["spark.jars"] == "local:///opt/spark/jars/udfs.jar"  # the field wins over spark_conf
    assert props["spark.jars.packages"] == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0"
    assert props["spark.jars.excludes"] == "org.slf4j:slf4j-api"
    assert props["spark.jars.repositories"] == "https://repo.example.com/maven"
    assert (props["spark.driver.memory"], props["spark.executor.memory"], props["spark.executor.cores"],
            props["spark.cores.max"]) == ("2g", "4g", "2", "6")
    # PythonRunner's own py-files argument: only what the worker has locally (it refuses remote URIs).
    assert body["appArgs"][:2] == ["/l/launch.py", "/opt/job/helpers.zip"]
    assert body["environmentVariables"]["JOB_MODE"] == "strict"


def test_kubernetes_env_vars_and_local_files(tmp_path):
    from airflow_streaming.targets.kubernetes import KubernetesClusterTarget

    token = tmp_path / "token"
    token.write_text("t")
    settings = {"image": "img", "kube_token_file": str(token), "runtime_path": "/opt/rt"}
    master = "k8s://https://127.0.0.1:6443"
    target = KubernetesClusterTarget(LocalStorage(), ControlPaths(str(tmp_path / "control" / "deps")), settings,
                                     master=master)
    ok = spec(tmp_path, master=master, deploy_mode="cluster", py_files=["local:///opt/app/h.zip"],
              env_vars={"MODE": "x"}, cluster=settings)
    plan = target.plan(ok, "r1", "/l/launch.py", [], {}, {}, str(tmp_path / "log"))
    assert plan.conf["spark.kubernetes.driverEnv.MODE"] == "x"
    assert options(spark_submit_argv(plan))["--py-files"] == "local:///opt/app/h.zip"
    local_file = dataclasses.replace(ok, files=("/home/me/lookup.csv",))
    with pytest.raises(SpecError, match=r"files\[0\]: .*spark.kubernetes.file.upload.path"):
        target.plan(local_file, "r1", "/l/launch.py", [], {}, {}, str(tmp_path / "log"))
    secret = dataclasses.replace(ok, env_vars={"API_TOKEN": "abcdef123456"})
    with pytest.raises(SpecError, match=r"env_vars.API_TOKEN: holds a secret.*kubernetes"):
        target.plan(secret, "r1", "/l/launch.py", [], {}, {}, str(tmp_path / "log"))


def test_a_properties_file_replaces_spark_defaults_and_carries_the_secret_conf(tmp_path):
    props = tmp_path / "job.properties"
    props.write_text("# job defaults\nspark.sql.shuffle.partitions 8\nspark.ui.enabled=false\n"
                     "spark.app.tag: a\\\n  b\n")
    s = spec(tmp_path, master="local[2]", properties_file=str(props))
    target = LocalTarget(LocalStorage(), ControlPaths(str(tmp_path / "control" / "deps")))
    plan = target.plan(s, "r1", "/l/launch.py", [], {}, {"spark.x.password": "pw-secret-1"}, str(tmp_path / "log"))
    assert submitted_properties(plan) == {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false",
                                          "spark.app.tag": "ab", "spark.x.password": "pw-secret-1"}
    with_secret = spark_submit_argv(plan, properties_file="/private/p")
    assert with_secret[with_secret.index("--properties-file") + 1] == "/private/p"
    assert "--load-spark-defaults" not in with_secret  # as SparkSubmitHook passes it: instead of the defaults
    plain = spark_submit_argv(dataclasses.replace(plan, secret_conf={}))
    assert plain[plain.index("--properties-file") + 1] == str(props)


# --------------------------------------------------------------------------- files are part of a version

def test_a_rollback_runs_v1_with_v1s_py_files(tmp_path):
    """deployed.json holds v2; history.json the upgrade from v1: the rollback's spec is v1's, dependencies
    included, though the task's own spec is v2's."""
    v1 = spec(tmp_path, master="local[2]", py_files=["/opt/job/v1/helpers.zip"], files=["/opt/job/v1/lookup.csv"],
              env_vars={"DB_PASSWORD": "v1-secret-pass"})
    v2 = dataclasses.replace(v1, version="v2", py_files=("/opt/job/v2/helpers.zip",), files=(),
                             env_vars={"DB_PASSWORD": "v1-secret-pass", "MODE": "new"})
    root = tmp_path / "control" / "deps"
    root.mkdir(parents=True)
    (root / "deployed.json").write_text(json.dumps({"run_id": "r2", "at": 1.0, "spec": sealed(v2.to_dict())}))
    (root / HISTORY_NAME).write_text(json.dumps([{"outcome": "SUCCEEDED", "from_version": "v1", "to_version": "v2",
                                                  "from_spec": sealed(v1.to_dict())}]))
    assert "v1-secret-pass" not in (root / HISTORY_NAME).read_text() + (root / "deployed.json").read_text()
    storage = LocalStorage()
    hook = types.SimpleNamespace(spec=v2, storage=storage, paths=ControlPaths(str(root)),
                                 deployed_path=str(root / "deployed.json"),
                                 deployed=lambda: json.loads((root / "deployed.json").read_text()))
    back = restart_spec(hook, Action.ROLLBACK)
    assert back == v1 and back.py_files == ("/opt/job/v1/helpers.zip",) and back.files == ("/opt/job/v1/lookup.csv",)
    again = restart_spec(hook, Action.RESTART)
    assert again == v2 and again.py_files == ("/opt/job/v2/helpers.zip",)


def test_the_compatibility_check_plans_the_candidate_with_its_own_files(tmp_path):
    """The check's local session gets the candidate's py_files, files and jars when it starts (argv of the
    check child); memory, cores and the queue are the cluster's and stay off it; a spec without dependencies
    gets nothing added."""
    from airflow_streaming.compat.run import check_command

    candidate = spec(tmp_path, py_files=["/opt/team/lib/enrich.py", "file:/opt/team/lib/more.zip"],
                     files=["/opt/team/data/sites.csv"], jars=["/opt/team/jars/udf.jar"], driver_memory="2g")
    argv, _ = check_command(candidate, allow_warnings=False)
    confs = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "--conf")
    assert confs["spark.submit.pyFiles"] == "/opt/team/lib/enrich.py,/opt/team/lib/more.zip"
    assert confs["spark.files"].split(",") == ["/opt/team/data/sites.csv", "/opt/team/lib/enrich.py",
                                               "/opt/team/lib/more.zip"]
    assert confs["spark.jars"] == "/opt/team/jars/udf.jar"
    assert "spark.driver.memory" not in confs
    bare, _ = check_command(spec(tmp_path), allow_warnings=False)
    assert not [a for a in bare if a.startswith(("spark.submit.pyFiles", "spark.files", "spark.jars"))]

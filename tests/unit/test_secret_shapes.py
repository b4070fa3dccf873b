"""Secrets are private by default (issue 35): every secret shape of ``tests/secret_corpus.py`` (``CONF_SHAPES``,
``ARG_SHAPES``, ``ENV_SHAPES``, each with its own canary) pushed through every exit there is without Spark -
the real argv builder of each target (local, standalone REST, YARN, Kubernetes), the control files a real
deploy writes (deployed.json, driver.json, lifecycle.json, history.json, the control log) through the
spark-submit stand-in, the Streams page's JSON, log records and notification bodies. No canary may show."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.operations import deploy_stream
from airflow_streaming.lifecycle.runner import LifecycleOptions
from airflow_streaming.notifications.events import StreamEvent, render_html, render_json, render_slack, render_text
from airflow_streaming.public_conf import is_public_conf_key
from airflow_streaming.redaction import MASK, RedactingFormatter, mask_spec, redact, split_conf
from airflow_streaming.spec import SpecError, StreamSpec
from airflow_streaming.targets.standalone import SECRET_CONF_ENV
from airflow_streaming.targets.submit_command import masked_command, spark_submit_argv
from airflow_streaming.ui import views
from airflow_streaming.ui.streams import discover, read_stream
from secret_corpus import ARG_SHAPES, CONF_SHAPES, ENV_SHAPES, REFUSED_CONF_SHAPES
from standins.yarn_fixtures import rm, submit_record  # noqa: F401 - fixtures

RUN = "20260101T000000Z-0000c0de"
#: The deploy targets whose launch plans are built here (no cluster is reached: only their argv builders).
TARGETS = {
    "local": dict(master="local[2]", deploy_mode=None),
    "standalone": dict(master="spark://m1:7077", deploy_mode="cluster", master_ui_url="http://m1:8090"),
    "yarn": dict(master="yarn", deploy_mode="cluster", cluster={"resourcemanager_url": "http://127.0.0.1:9"}),
    "kubernetes": dict(master="k8s://https://127.0.0.1:6443", deploy_mode="cluster",
                       cluster={"image": "registry.example/streams:1", "namespace": "streams"}),
}
K8S_UPLOAD = {"spark.kubernetes.file.upload.path": "s3a://bucket/uploads"}


def base_spec(tmp_path: Path, **fields) -> StreamSpec:
    return StreamSpec(**{"name": "corpus", "application": "events_etl", "checkpoint_location": str(tmp_path / "ckpt"),
                         "control_location": str(tmp_path / "ctl"), "master": "local[2]",
                         "application_args": ["--input", "/in"], **fields})


def launch_exits(spec: StreamSpec, target: str) -> tuple[list[str], dict[str, str]]:
    """What the argv builder of ``target`` puts where others can read it, and the plan's private conf."""
    fields = dict(TARGETS[target])
    if target == "kubernetes":
        spec = replace(spec, spark_conf={**K8S_UPLOAD, **spec.spark_conf})
    hook = SparkStreamHook(replace(spec, **fields))
    plan = hook.launch_plan(RUN)
    argv = spark_submit_argv(plan, hook.target.binary(plan), "<0600 properties file>" if plan.secret_conf else None)
    texts = [" ".join(argv), hook.target.describe_command(plan), json.dumps(plan.conf), " ".join(plan.runtime_args)]
    if target == "standalone":  # the worker puts sparkProperties and appArgs on the driver JVM's command line
        body = hook.target.request_body(plan)
        body["environmentVariables"].pop(SECRET_CONF_ENV, None)  # the private channel (the driver's own env)
        texts.append(json.dumps(body))
    if target == "local":
        texts.append(hook.command_for(RUN)[1])
    return texts, plan.secret_conf


@pytest.mark.parametrize("key,value,canary", CONF_SHAPES, ids=[k for k, _, _ in CONF_SHAPES])
def test_private_conf_never_reaches_a_command_line_of_any_target(tmp_path, key, value, canary):
    spec = base_spec(tmp_path, spark_conf={key: value, "spark.sql.shuffle.partitions": "2"})
    for target in TARGETS:
        if target == "kubernetes" and key.startswith("spark.kubernetes.driverEnv."):
            # private conf reaches a driver pod after it started: refused, naming the entry, not the value
            with pytest.raises(SpecError, match=rf"spark_conf\.{key}: .*secretKeyRef") as refused:
                launch_exits(spec, target)
            assert canary not in str(refused.value)
            continue
        texts, secret_conf = launch_exits(spec, target)
        assert secret_conf.get(key) == value, (target, "the private channel carries it")
        for text in texts:
            assert canary not in text, (target, text)
        assert "spark.sql.shuffle.partitions=2" in texts[0]  # a public setting stays on the command line


@pytest.mark.parametrize("key,value,canary", CONF_SHAPES, ids=[k for k, _, _ in CONF_SHAPES])
def test_private_conf_is_masked_at_rest_in_the_ui_logs_and_notifications(
        tmp_path, rm, submit_record, caplog, key, value, canary):  # noqa: F811 - the fixtures
    spec = base_spec(tmp_path, master="yarn", deploy_mode="cluster",
                     cluster={"resourcemanager_url": rm.url},
                     spark_conf={key: value, "spark.sql.shuffle.partitions": "2"})
    with caplog.at_level(logging.DEBUG):
        result = deploy_stream(spec, LifecycleOptions(await_progress=False, owner="dag.task run r try 1"))
    assert result["run_id"]
    # The real spark-submit call (through the stand-in): argv clean, the 0600 properties file held it.
    (call,) = [json.loads(line) for line in submit_record.read_text().splitlines()]
    assert canary not in json.dumps(call["argv"]) and canary in call["properties"]
    # Files at rest: every file of the control directory (deployed.json, driver.json, lifecycle.json,
    # history.json, the control log...).
    ctl = Path(spec.control_dir)
    files = [p for p in ctl.rglob("*") if p.is_file()]
    assert {"deployed.json", "lifecycle.json", "history.json"} <= {p.name for p in files}
    for path in files:
        assert canary not in path.read_text(errors="replace"), path
    assert json.loads((ctl / "deployed.json").read_text())["spec"]["spark_conf"][key] == MASK
    # Task logs of the deploy.
    assert canary not in caplog.text
    # The Streams page: the overview row and the stream's page, from what the deploy wrote - and from a
    # deployed.json an older version wrote unmasked.
    ref = next(r for r in discover(None, [spec.control_location]).streams if r.name == spec.name)
    snap = read_stream(ref)
    served = json.dumps([views.overview_row(snap), views.stream_detail(snap)])
    assert canary not in served
    raw = views.spec_view(spec.to_dict())
    assert canary not in json.dumps(raw) and raw["spark_conf"][key] == MASK
    # A log record that names the conf (free text and JSON, where a JAAS string is JSON-escaped).
    record = logging.LogRecord("airflow_streaming", logging.ERROR, __file__, 1, "submitted %s with %s",
                               (f"{key}={value}", json.dumps({"spark_conf": {key: value}})), None)
    assert canary not in RedactingFormatter().format(record)
    assert canary not in json.dumps(redact({"error": f"failed: --conf {key}={value}", "conf": {key: value}}))
    # Notification bodies of a failure whose message carries it.
    event = StreamEvent(kind="FAILED", stream=spec.name, version="v1", run_id=result["run_id"],
                        error_first_line=f"spark-submit failed: --conf {key}={value}",
                        health_reasons=[json.dumps({key: value})])
    subject, body = render_text(event)
    for text in (subject, body, json.dumps(render_slack(event)), json.dumps(render_json(event)), render_html(event)):
        assert canary not in text


@pytest.mark.parametrize("args,index,canary", ARG_SHAPES, ids=[f"arg-{n}" for n in range(len(ARG_SHAPES))])
def test_arguments_that_look_like_credentials_are_refused_and_masked(tmp_path, args, index, canary):
    spec = base_spec(tmp_path, application_args=args)
    with pytest.raises(SpecError) as err:
        spec.refuse_plain_secrets()
    assert err.value.field == f"application_args[{index}]"
    assert "secret_args=" in str(err.value) and canary not in str(err.value)
    for target in ("local", "yarn"):
        with pytest.raises(SpecError):
            SparkStreamHook(replace(spec, **TARGETS[target])).launch_plan(RUN)
    # Specs at rest, the UI and records of specs an older version accepted.
    assert canary not in json.dumps(mask_spec(spec.to_dict()))
    assert canary not in json.dumps(views.spec_view(spec.to_dict()))
    assert canary not in masked_command(["spark-submit", "--master", "local[2]", "launch.py", "--", *args])
    assert canary not in redact(" ".join(args))


@pytest.mark.parametrize("key,value,canary", REFUSED_CONF_SHAPES, ids=[k for k, _, _ in REFUSED_CONF_SHAPES])
def test_a_secret_in_jvm_options_is_refused_before_anything_runs(tmp_path, key, value, canary):
    """Spark's launchers put JVM options on the JVM's command line (seen on a real driver's /proc/<pid>/cmdline,
    tests/integration/test_secrets_off_command_line.py), whatever channel carried the conf."""
    spec = base_spec(tmp_path, spark_conf={key: value})
    with pytest.raises(SpecError) as err:
        spec.refuse_plain_secrets()
    assert err.value.field == f"spark_conf.{key}" and canary not in str(err.value)
    for target in ("local", "yarn"):
        with pytest.raises(SpecError):
            SparkStreamHook(replace(spec, **TARGETS[target])).launch_plan(RUN)
    base_spec(tmp_path, spark_conf={key: "-Xss4m -Dlog4j2.configurationFile=/etc/spark/log4j2.xml"}
              ).refuse_plain_secrets()  # options without a secret are fine


def test_a_masked_argument_does_not_turn_the_check_off(tmp_path):
    StreamSpec.refuse_plain_secrets(base_spec(tmp_path, application_args=["--password", MASK, "--token=" + MASK]))
    with pytest.raises(SpecError) as err:
        base_spec(tmp_path, application_args=["--password", MASK, "--pass", "hunter2-x"]).refuse_plain_secrets()
    assert err.value.field == "application_args[3]"


@pytest.mark.parametrize("name,value,canary", ENV_SHAPES, ids=[n for n, _, _ in ENV_SHAPES])
def test_secret_environment_variables_travel_privately_and_are_masked_at_rest(tmp_path, name, value, canary):
    spec = base_spec(tmp_path, env_vars={name: value, "TZ": "UTC"})
    for target in ("local", "yarn"):
        texts, secret_conf = launch_exits(spec, target)
        for text in texts:
            assert canary not in text, (target, text)
    assert secret_conf == {f"spark.yarn.appMasterEnv.{name}": value}  # YARN: the private channel
    assert canary not in json.dumps(mask_spec(spec.to_dict()))


def test_the_allowlist_keeps_known_settings_public_and_everything_else_private():
    public = ["spark.sql.shuffle.partitions", "spark.executor.memory", "spark.driver.memory", "spark.app.name",
              "spark.yarn.queue", "spark.yarn.tags", "spark.kubernetes.file.upload.path",
              "spark.ui.showConsoleProgress",
              "spark.metrics.conf.*.sink.prometheusServlet.class", "spark.redaction.regex", "spark.jars.packages",
              "spark.kubernetes.driver.secretKeyRef.DB_PASS", "spark.airflow_streaming.run_id", "spark.executor.id",
              "spark.kubernetes.authenticate.driver.serviceAccountName", "spark.streaming.backpressure.enabled"]
    private = ["spark.executorEnv.PATH", "spark.yarn.appMasterEnv.X", "spark.kubernetes.driverEnv.X",
               "spark.sql.catalog.c.token", "spark.sql.catalog.c.password", "spark.yarn.auth.x", "spark.sql.x.sas",
               "spark.sql.x.secret", "spark.ui.auth.pass", "spark.hadoop.fs.s3a.access.key", "spark.myapp.anything",
               "spark.authenticate.secret", "spark.ssl.keyPassword",
               "spark.kubernetes.authenticate.submission.oauthToken", "spark.kubernetes.authenticate.driver.oauthToken",
               "spark.es.nodes", "spark.airflow_streaming.secret_arg.000.value",
               "", "sparkx.sql.a"]
    assert [k for k in public if not is_public_conf_key(k)] == []
    assert [k for k in private if is_public_conf_key(k)] == []
    # A public key whose value holds a secret is private all the same.
    plain, secret = split_conf({"spark.driver.extraJavaOptions": "-Dx.password=p4ss-word", "spark.driver.memory": "1g"})
    assert plain == {"spark.driver.memory": "1g"} and list(secret) == ["spark.driver.extraJavaOptions"]


def test_the_corpus_is_large_and_its_canaries_unique():
    canaries = [c for shapes in (CONF_SHAPES, ARG_SHAPES, ENV_SHAPES, REFUSED_CONF_SHAPES) for _, _, c in shapes]
    assert len(CONF_SHAPES) + len(ARG_SHAPES) + len(REFUSED_CONF_SHAPES) >= 30 and len(set(canaries)) == len(canaries)

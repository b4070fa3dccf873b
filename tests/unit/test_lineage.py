"""The OpenLineage facets of the lifecycle operators (airflow_streaming/operators/lineage.py): dataset naming, the
stream's run facet and the operators' ``get_openlineage_facets_on_*`` methods. The naming and the facet's fields
need no provider; the ``OperatorLineage`` tests skip when the OpenLineage provider is not installed."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from airflow_streaming.operators.lineage import FACET_NAME, PRODUCER, dataset_naming, stream_facet_fields
from airflow_streaming.spark_runtime import installed_version
from airflow_streaming.spec import StreamSpec

ROOT = pathlib.Path(__file__).resolve().parents[2]
SECRET = "unit-lineage-s3cr3t"


def _spec(**overrides):
    fields = {"name": "orders", "application": "/opt/jobs/orders.py", "checkpoint_location": "/data/ck/orders",
              "control_location": "/data/control", "version": "v2",
              "spark_conf": {"spark.hadoop.fs.s3a.secret.key": SECRET}, "secret_args": {"--token": SECRET},
              "assets": {"sources": ["kafka://broker:9092/orders", "file:///data/in/"],
                         "sinks": ["s3://lake/orders/clean", "hdfs://nn/warehouse/orders"]}}
    return StreamSpec.from_dict({**fields, **overrides})


@pytest.mark.parametrize(("uri", "expected"), [
    ("file:///data/out", ("file", "/data/out")),
    ("file://host7/data/out", ("file://host7", "/data/out")),
    ("s3://lake/orders/clean", ("s3://lake", "orders/clean")),
    ("s3a://lake/orders", ("s3://lake", "orders")),
    ("s3://lake", ("s3://lake", "/")),
    ("gs://bucket/a/b", ("gs://bucket", "a/b")),
    ("hdfs://nn:9000/warehouse/t", ("hdfs://nn:9000", "/warehouse/t")),
    ("hdfs://nn/warehouse/t", ("hdfs://nn:8020", "/warehouse/t")),
    ("kafka://broker:9093/orders", ("kafka://broker:9093", "orders")),
    ("kafka://broker/orders", ("kafka://broker:9092", "orders")),
    ("kafka://user@broker:9092/orders", ("kafka://broker:9092", "orders")),
    ("postgres://db.example:5433/shop/public/orders", ("postgres://db.example:5433", "shop.public.orders")),
    ("x-team://kept", ("x-team://kept", "/")),
])
def test_dataset_naming_follows_openlineage(uri, expected):
    assert dataset_naming(uri) == expected


def test_the_facet_holds_the_public_fields_of_the_spec_and_nothing_secret():
    fields = stream_facet_fields(_spec(), "upgrade", previous_version="v1", run_id="run-1", app_id="local-1")
    assert fields == {"stream": "orders", "version": "v2", "action": "upgrade", "deployMode": "client",
                      "checkpointLocation": "/data/ck/orders", "sparkRuntime": f"Spark {installed_version()} (installed)",
                      "sparkVersion": installed_version(), "previousVersion": "v1", "runId": "run-1",
                      "appId": "local-1"}
    assert SECRET not in json.dumps(fields)


def test_the_facet_leaves_out_what_is_not_known_and_names_the_runtime():
    spec = _spec(spark_runtime="3.5.7", deploy_mode="cluster", master="spark://m:7077",
                 checkpoint_location="hdfs://nn:8020/ck/orders")
    fields = stream_facet_fields(spec, "deploy", previous_version=None, run_id="")
    assert fields["sparkRuntime"] == "Spark 3.5.7" and fields["sparkVersion"] == "3.5.7"
    assert fields["deployMode"] == "cluster"
    assert fields["checkpointLocation"] == "hdfs://nn:8020/ck/orders"
    assert not {"previousVersion", "runId", "appId"} & set(fields)
    home = stream_facet_fields(_spec(spark_runtime={"spark_home": "/opt/spark", "python": "/usr/bin/python3"}), "stop")
    assert home["sparkRuntime"] == "Spark at /opt/spark" and "sparkVersion" not in home


def test_the_operators_need_no_openlineage_to_import():
    code = ("import sys\n"
            "import airflow_streaming.operators.deploy, airflow_streaming.operators.lifecycle, "
            "airflow_streaming.operators.stop\n"
            "loaded = sorted(m for m in sys.modules if m.startswith(('openlineage', "
            "'airflow.providers.openlineage.extractors', 'airflow_streaming.operators.lineage_facets')))\n"
            "assert not loaded, loaded\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]


# --- with the OpenLineage provider ------------------------------------------------------------------------------

def _provider():
    return pytest.importorskip("airflow.providers.openlineage.extractors",
                               reason="the OpenLineage provider (extra `openlineage`) is not installed")


def _facet_dict(lineage):
    from openlineage.client.serde import Serde

    return json.loads(Serde.to_json(lineage.run_facets[FACET_NAME]))


def test_the_deploy_operator_gives_the_spec_datasets_and_a_schema_valid_facet():
    extractors = _provider()
    from openlineage_schema import _errors, registry

    from airflow_streaming.operators.deploy import SparkStreamDeployOperator

    operator = SparkStreamDeployOperator(task_id="deploy", spec=_spec().to_dict())
    lineage = operator.get_openlineage_facets_on_start()
    assert isinstance(lineage, extractors.OperatorLineage)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("kafka://broker:9092", "orders"), ("file", "/data/in")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("s3://lake", "orders/clean"),
                                                                ("hdfs://nn:8020", "/warehouse/orders")]
    facet = _facet_dict(lineage)
    assert facet["_producer"] == PRODUCER and facet["action"] == "deploy" and "runId" not in facet
    assert _errors(facet["_schemaURL"], facet, registry()) == []
    assert SECRET not in json.dumps(facet)
    # what the action learnt reaches the complete (and failure) event
    operator._note_lineage(_spec(), run_id="run-9", app_id="local-9")
    for done in (operator.get_openlineage_facets_on_complete(None), operator.get_openlineage_facets_on_failure(None)):
        assert _facet_dict(done)["runId"] == "run-9" and _facet_dict(done)["appId"] == "local-9"
        assert len(done.outputs) == 2


def test_the_facet_schema_refuses_a_facet_without_its_required_fields():
    _provider()
    from openlineage_schema import _errors, registry

    facet = _facet_dict(stream_lineage_of_deploy())
    del facet["stream"]
    facet["deployMode"] = "somewhere"
    errors = _errors(facet["_schemaURL"], facet, registry())
    assert any("'stream' is a required property" in e for e in errors) and any("somewhere" in e for e in errors)


def stream_lineage_of_deploy():
    from airflow_streaming.operators.lineage import operator_lineage

    return operator_lineage(_spec(), "deploy")


def test_the_facet_class_and_its_schema_name_the_same_fields():
    _provider()
    from airflow_streaming.operators.lineage_facets import SparkStreamRunFacet

    schema = json.loads((ROOT / "airflow_streaming/operators/SparkStreamRunFacet.json").read_text())
    fields = schema["$defs"]["SparkStreamRunFacet"]["allOf"][1]
    import attrs

    declared = {a.name for a in attrs.fields(SparkStreamRunFacet) if not a.name.startswith("_")}
    assert declared == set(fields["properties"])
    assert set(fields["required"]) == {a.name for a in attrs.fields(SparkStreamRunFacet)
                                       if not a.name.startswith("_") and a.default is attrs.NOTHING}


def test_upgrade_and_stop_name_their_action():
    _provider()
    from airflow_streaming.operators.lifecycle import SparkStreamUpgradeOperator
    from airflow_streaming.operators.stop import SparkStreamStopOperator

    upgrade = SparkStreamUpgradeOperator(task_id="upgrade", spec=_spec().to_dict())
    assert _facet_dict(upgrade.get_openlineage_facets_on_start())["action"] == "upgrade"
    upgrade._note_lineage(_spec(), previous_version="v1", run_id="run-2")
    done = _facet_dict(upgrade.get_openlineage_facets_on_complete(None))
    assert (done["previousVersion"], done["runId"], done["version"]) == ("v1", "run-2", "v2")
    # a restart of the deployed spec names no spec: nothing known before it runs
    assert SparkStreamUpgradeOperator(task_id="restart", action="restart").get_openlineage_facets_on_start() is None
    rollback = SparkStreamUpgradeOperator(task_id="rollback", action="rollback", current=_spec().to_dict())
    assert _facet_dict(rollback.get_openlineage_facets_on_start())["action"] == "rollback"
    stop = SparkStreamStopOperator(task_id="stop", spec=_spec().to_dict()).get_openlineage_facets_on_start()
    assert stop.inputs == [] and stop.outputs == [] and _facet_dict(stop)["action"] == "stop"

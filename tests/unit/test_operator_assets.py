"""The deploy and upgrade operators list a spec's declared assets as the task's inlets and outlets, on the
DAG Airflow parses and serializes (no Spark here: tests/integration/test_stream_assets_dag.py deploys one)."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import DAG, Asset

from airflow_streaming.exceptions import SpecError
from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.operators.lifecycle import SparkStreamUpgradeOperator
from airflow_streaming.spec import StreamSpec

ASSETS = {"sources": ["kafka://broker:9092/orders"], "sinks": ["file:///data/out/orders/", "s3://lake/orders"]}


def spec_dict(**overrides: Any) -> dict[str, Any]:
    return {"name": "orders", "application": "events_etl", "checkpoint_location": "/data/checkpoints/orders",
            "control_location": "/data/control", "assets": ASSETS, **overrides}


def uris(items: list[Any]) -> list[str]:
    return [item.uri for item in items]


@pytest.mark.parametrize("spec", [spec_dict(), StreamSpec.from_dict(spec_dict())], ids=["dict", "StreamSpec"])
def test_deploy_lists_the_sinks_as_outlets_and_the_sources_as_inlets(spec: Any) -> None:
    task = SparkStreamDeployOperator(task_id="deploy", spec=spec)
    assert all(isinstance(item, Asset) for item in task.outlets + task.inlets)
    assert uris(task.outlets) == ["file:///data/out/orders", "s3://lake/orders"]
    assert uris(task.inlets) == ["kafka://broker:9092/orders"]


def test_the_authors_own_inlets_and_outlets_are_kept_first_and_not_repeated() -> None:
    mine = Asset(name="orders_parquet", uri="file:///data/out/orders", extra={"owner": "team-a"})
    other = Asset(uri="s3://elsewhere/x")
    task = SparkStreamDeployOperator(task_id="deploy", spec=spec_dict(), outlets=[mine, other], inlets=[other])
    assert task.outlets[0] is mine and task.outlets[1] is other
    assert uris(task.outlets) == ["file:///data/out/orders", "s3://elsewhere/x", "s3://lake/orders"]
    assert uris(task.inlets) == ["s3://elsewhere/x", "kafka://broker:9092/orders"]


@pytest.mark.parametrize("spec", [
    "specs/orders.yaml",                                                   # a spec file, rendered at run time
    "{{ var.json.orders_spec }}",                                          # a template string
    spec_dict(assets={"sinks": ["file:///data/out/{{ ds }}"]}),            # templated assets
    spec_dict(assets=None), spec_dict(assets={}),                          # none declared
])
def test_a_spec_not_known_at_parse_time_leaves_them_as_passed(spec: Any) -> None:
    mine = Asset(uri="file:///mine")
    task = SparkStreamDeployOperator(task_id="deploy", spec=spec, outlets=[mine])
    assert task.outlets == [mine] and task.inlets == []


def test_bad_assets_of_a_dict_spec_fail_the_dag_file() -> None:
    with pytest.raises(SpecError) as err:
        SparkStreamDeployOperator(task_id="deploy", spec=spec_dict(assets={"sinks": ["file:///o", "/no/scheme"]}))
    assert err.value.field == "assets.sinks[1]"


def test_upgrade_lists_the_target_specs_assets_or_currents_when_it_has_none() -> None:
    upgrade = SparkStreamUpgradeOperator(task_id="upgrade", spec=spec_dict(version="v2"))
    assert uris(upgrade.outlets) == ["file:///data/out/orders", "s3://lake/orders"]
    assert uris(upgrade.inlets) == ["kafka://broker:9092/orders"]
    restart = SparkStreamUpgradeOperator(task_id="restart", action="restart", current=spec_dict())
    assert uris(restart.outlets) == ["file:///data/out/orders", "s3://lake/orders"]
    rollback = SparkStreamUpgradeOperator(task_id="rollback", action="rollback")
    assert rollback.outlets == [] and rollback.inlets == []


def test_the_serialized_dag_carries_them() -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("orders_assets", schedule=None) as dag:
        SparkStreamDeployOperator(task_id="deploy", spec=spec_dict())
        SparkStreamUpgradeOperator(task_id="upgrade", spec=spec_dict(version="v2"))
    parsed = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    for task_id in ("deploy", "upgrade"):
        task = parsed.get_task(task_id)
        assert uris(task.outlets) == ["file:///data/out/orders", "s3://lake/orders"]
        assert uris(task.inlets) == ["kafka://broker:9092/orders"]

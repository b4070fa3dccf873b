"""The spec's Asset URI rule (:mod:`airflow_streaming.stream_assets`, pure) agrees with Airflow's own ``Asset``."""

from __future__ import annotations

import warnings

import pytest
from airflow.sdk import Asset

from airflow_streaming.exceptions import SpecError
from airflow_streaming.stream_assets import check_asset_uri, spec_assets
from airflow_streaming.spec import StreamSpec

ACCEPTED = [
    "file:///data/out", "file:///data/out/", "FILE:///data/out//", "s3://bucket/key", "S3://bucket/a/b/?z=1&a=2#frag",
    "kafka://broker:9092/topic", "postgres://host:5432/db/schema/table", "postgresql://host/db/schema/table",
    "gs://bucket/path/", "hdfs://namenode:8020/warehouse/orders", "x-custom://Anything/Kept/", "mysql://h:3306/db/t",
]
#: What Airflow itself refuses (with no provider needed): each must be refused here too.
REFUSED_BY_AIRFLOW = ["", "   ", "airflow://reserved", "AIRFLOW://x/y", "s3://b/" + "k" * 1500]


@pytest.mark.parametrize("uri", ACCEPTED)
def test_an_accepted_uri_is_normalised_as_airflow_normalises_it(uri: str) -> None:
    assert check_asset_uri(uri, "assets.sinks[0]") == Asset(uri=uri).uri


@pytest.mark.parametrize("uri", REFUSED_BY_AIRFLOW)
def test_what_airflow_refuses_is_refused(uri: str) -> None:
    with pytest.raises((ValueError, TypeError)):
        Asset(uri=uri)
    with pytest.raises(SpecError) as err:
        check_asset_uri(uri, "assets.sinks[2]")
    assert err.value.field == "assets.sinks[2]"


def test_a_password_airflow_would_drop_is_refused() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert Asset(uri="s3://user:secret@bucket/key").uri == "s3://bucket/key"
    assert any("password" in str(w.message) for w in caught)
    with pytest.raises(SpecError, match="password"):
        check_asset_uri("s3://user:secret@bucket/key", "assets.sinks[0]")


def test_spec_assets() -> None:
    spec = StreamSpec(name="orders", application="events_etl", checkpoint_location="/data/c",
                      control_location="/data/k", assets={"sources": ["kafka://b:9092/t"], "sinks": ["file:///o/"]})
    assert spec_assets(spec) == (("kafka://b:9092/t",), ("file:///o",))
    assert spec_assets(StreamSpec(name="orders", application="events_etl", checkpoint_location="/data/c",
                                  control_location="/data/k")) == ((), ())

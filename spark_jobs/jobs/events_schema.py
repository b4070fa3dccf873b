"""The event schema shared by the bundled jobs (see ``spark_jobs.event_generator``)."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

EVENT_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("device_id", StringType()),
        StructField("event_type", StringType()),
        StructField("ts", StringType()),
        StructField("signal", DoubleType()),
        StructField("attrs", StructType([StructField("firmware", StringType()), StructField("site", StringType())])),
    ]
)

TS_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSX"


def event_time(ts: Column) -> Column:
    """Parse the ISO-8601 event time; null when it does not parse."""
    return F.try_to_timestamp(ts, F.lit(TS_FORMAT))

"""orders_dedup: a team's own PySpark job, as a team keeps it in its repository (it imports nothing of the
provider). It deduplicates JSON events by id (state with a watermark), tags each with its device's site
from ``sites.csv`` (shipped with ``files``) through the ``enrich`` module (shipped with ``py_files``), and
appends them to Parquet every 30 seconds.

    orders_dedup.py --input DIR --output DIR --checkpoint DIR
"""

import argparse
import csv

from pyspark import SparkFiles
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import enrich  # shipped with py_files

parser = argparse.ArgumentParser()
parser.add_argument("--input", required=True)
parser.add_argument("--output", required=True)
parser.add_argument("--checkpoint", required=True)
args = parser.parse_args()

spark = SparkSession.builder.appName("orders-dedup").getOrCreate()
with open(SparkFiles.get("sites.csv"), encoding="utf-8") as fh:  # shipped with files
    sites = {row["device_id"]: row["site"] for row in csv.DictReader(fh)}
events = (spark.readStream.schema("event_id string, device_id string, event_type string, ts string, signal double")
          .json(args.input).withColumn("event_time", F.to_timestamp("ts")))
unique = events.withWatermark("event_time", "10 minutes").dropDuplicates(["event_id", "event_time"])
(enrich.with_site(unique, sites).writeStream.queryName("orders_dedup").format("parquet")
 .option("path", args.output).option("checkpointLocation", args.checkpoint)
 .trigger(processingTime="30 seconds").start().awaitTermination())

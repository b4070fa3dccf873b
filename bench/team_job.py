"""A team's own stateful streaming job, as a team would bring it: nothing of this product is imported.

The benches run it beside the bundled jobs (``mttr_bench.py --job script``, ``upgrade_bench.py --job
script``) to measure what a user script gets from the hot standby and the warm upgrade.

    team_job.py --input DIR --output DIR --checkpoint DIR [--window "1 minute"] [--watermark "30 seconds"]
                [--max-files-per-trigger N] [--trigger "1 second"]

JSON events (event_id, device_id, signal, ts) -> per-device event-time windows (count, average) appended to
Parquet once the watermark passes them; one query named ``team_windows``.
"""

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

parser = argparse.ArgumentParser()
parser.add_argument("--input", required=True)
parser.add_argument("--output", required=True)
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--window", default="1 minute")
parser.add_argument("--watermark", default="30 seconds")
parser.add_argument("--max-files-per-trigger", type=int, default=100)
parser.add_argument("--trigger", default="1 second")
args = parser.parse_args()

spark = SparkSession.builder.appName("team-windows").getOrCreate()
schema = "event_id string, device_id string, event_type string, ts string, signal double"
events = (spark.readStream.format("text").option("maxFilesPerTrigger", args.max_files_per_trigger).load(args.input)
          .select(F.from_json("value", schema).alias("e")).select("e.*")
          .withColumn("event_time", F.to_timestamp("ts"))
          .where(F.col("event_id").isNotNull() & F.col("event_time").isNotNull()))
windows = (events.withWatermark("event_time", args.watermark)
           .groupBy(F.window("event_time", args.window), "device_id")
           .agg(F.count("*").alias("events"), F.avg("signal").alias("avg_signal")))
(windows.writeStream.queryName("team_windows").outputMode("append").format("parquet")
 .option("path", args.output).option("checkpointLocation", args.checkpoint)
 .trigger(processingTime=args.trigger).start().awaitTermination())

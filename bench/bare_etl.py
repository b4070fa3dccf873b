"""Baseline for ``bench/lifecycle_bench.py``: the bundled events ETL WITHOUT the project's runtime.

Run with ``spark-submit --master local[2] bench/bare_etl.py --input DIR --output DIR --quarantine DIR
--checkpoint DIR [--max-files-per-trigger N] [--trigger-seconds S]``.

It reuses :func:`spark_jobs.jobs.events_etl.parsed_events` and :func:`~spark_jobs.jobs.events_etl.write_batch`
(so every micro-batch does exactly the work of the managed ``events_etl`` job) but has none of the
runtime around it: no lease, no status document, no snapshot thread, no run-marker watch. Its own
SparkSession starts the query directly with the same checkpoint/trigger options, and a minimal
StreamingQueryListener prints to stdout::

    BENCH first_progress <epoch seconds>          (once, at the first progress event)
    BENCH batch <batchId> <batchDuration ms> <numInputRows>   (every progress event)

It runs until SIGTERM, on which the Python driver just exits (no graceful stop, no batch boundary).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

# The project is not necessarily installed in the driver's interpreter: make it importable.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bare_etl")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--quarantine", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-files-per-trigger", type=int, default=100)
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--query-name", default="bare_etl")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    ns = parse_args(argv)
    # SIGTERM: exit at once, whatever the query is doing (the JVM gets the signal too and runs its hooks).
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))

    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener

    from spark_jobs.jobs.events_etl import parsed_events, write_batch

    class BenchListener(StreamingQueryListener):
        def __init__(self) -> None:
            self.seen_first = False

        def onQueryStarted(self, event):  # noqa: N802 - Spark's API
            pass

        def onQueryProgress(self, event):  # noqa: N802
            now = time.time()
            progress = event.progress
            if not self.seen_first:
                self.seen_first = True
                print(f"BENCH first_progress {now:.6f}", flush=True)
            print(f"BENCH batch {progress.batchId} {progress.batchDuration} {progress.numInputRows}", flush=True)

        def onQueryIdle(self, event):  # noqa: N802
            pass

        def onQueryTerminated(self, event):  # noqa: N802
            pass

    spark = SparkSession.builder.appName("bare_etl").getOrCreate()
    spark.streams.addListener(BenchListener())
    query = (
        parsed_events(spark, ns).writeStream.foreachBatch(write_batch(ns))
        .option("checkpointLocation", ns.checkpoint)
        .trigger(processingTime=f"{ns.trigger_seconds} seconds")
        .queryName(ns.query_name)
        .start()
    )
    print(f"BENCH query_started {time.time():.6f}", flush=True)
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

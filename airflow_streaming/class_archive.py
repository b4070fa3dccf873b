"""A class-data-sharing archive (AppCDS) of the classes a Spark driver loads, so driver JVMs start faster.

Most of a restart's downtime is the new driver's JVM and Spark session starting (BENCHMARKS.md): the
JVM loads and verifies thousands of classes from pyspark's jars. A dynamic AppCDS archive holds them
pre-parsed; a JVM started with ``-XX:SharedArchiveFile=<archive>`` maps it instead.

    python -m airflow_streaming.class_archive build [--path P]   # once per host (~30-60 s), prints the path
    python -m airflow_streaming.class_archive option [--path P]  # the java option, or nothing if no archive
    export SPARK_SUBMIT_OPTS="$(python -m airflow_streaming.class_archive option)"

``SPARK_SUBMIT_OPTS`` reaches every JVM that ``spark-submit`` starts on this host: local and client-mode
drivers, the compatibility gate's session. An archive is only valid for the JDK and the jars it was
built from; its name carries a key of both (:func:`archive_key`), and a JVM given an archive that does
not match (another JDK, changed jars) prints one warning and starts normally - never fails.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENV_DIR = "AIRFLOW_STREAMING_CLASS_ARCHIVE_DIR"
"""Where archives are kept (default ``~/.cache/airflow-streaming/class-archive``)."""


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else (shutil.which("java") or "java")


def archive_key() -> str:
    """16 hex digits naming the JDK (``java -version``) and pyspark's jars (names, sizes, mtimes)."""
    import pyspark

    digest = hashlib.sha256()
    version = subprocess.run([_java(), "-version"], capture_output=True, text=True, timeout=120)
    digest.update((version.stderr + version.stdout).encode())
    jars = Path(pyspark.__file__).parent / "jars"
    for jar in sorted(jars.glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{int(stat.st_mtime)}\n".encode())
    return digest.hexdigest()[:16]


def default_path() -> Path:
    folder = os.environ.get(ENV_DIR) or os.path.join(os.path.expanduser("~"), ".cache", "airflow-streaming",
                                                     "class-archive")
    return Path(folder) / f"spark-{archive_key()}.jsa"


def java_option(path: Path | None = None) -> str:
    """``-XX:SharedArchiveFile=<path>`` if the archive exists, else ``""``."""
    path = path or default_path()
    return f"-XX:SharedArchiveFile={path}" if path.is_file() else ""


# The workload whose classes go into the archive: what a bundled driver does in its first batches (a
# session, a JSON file source, a watermark, a windowed aggregation with state, de-duplication, a
# parquet sink, a batch read back).
_WORKLOAD = r'''
import json, os, sys
from pyspark.sql import SparkSession, functions as F
work = sys.argv[1]
os.makedirs(f"{work}/in", exist_ok=True)
with open(f"{work}/in/events-0.json", "w") as fh:
    for i in range(200):
        fh.write(json.dumps({"event_id": f"e{i}", "device_id": f"d{i % 4}", "value": i * 0.5,
                             "event_time": f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z"}) + "\n")
spark = (SparkSession.builder.master("local[1]").appName("airflow-streaming-class-archive")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
schema = "event_id string, device_id string, value double, event_time timestamp"
events = spark.readStream.schema(schema).json(f"{work}/in").withWatermark("event_time", "30 seconds")
counts = (events.dropDuplicates(["event_id", "event_time"])
          .groupBy(F.window("event_time", "1 minute"), "device_id").agg(F.count("*").alias("events"),
                                                                     F.avg("value").alias("mean")))
query = (counts.writeStream.format("parquet").outputMode("append").option("path", f"{work}/out")
         .option("checkpointLocation", f"{work}/ckpt").trigger(availableNow=True).start())
query.awaitTermination(300)
spark.read.parquet(f"{work}/out").count()
gateway = spark.sparkContext._gateway
spark.stop()
proc = getattr(gateway, "proc", None)
if proc is not None:  # the JVM writes the archive as it exits: wait for it
    proc.stdin.close()
    proc.wait(timeout=300)
'''


def build(path: Path | None = None, timeout: float = 600) -> Path:
    """Build the archive at ``path`` (default :func:`default_path`) unless it exists; return its path.

    One build at a time per folder (a lock file); the archive is written under a temporary name and
    renamed into place, so a JVM never maps a half-written one."""
    from airflow_streaming.pyspark_install import full_pyspark_missing, needs_full_pyspark

    missing = full_pyspark_missing()
    if missing:
        raise RuntimeError(needs_full_pyspark("building the class archive", missing))
    path = path or default_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return path
        work = tempfile.mkdtemp(prefix="airflow-streaming-class-archive-")
        partial = path.with_suffix(f".{os.getpid()}.partial")
        try:
            env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial}",
                   "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
            proc = subprocess.run([sys.executable, "-c", _WORKLOAD, work], env=env, capture_output=True, text=True,
                                  timeout=timeout)
            if proc.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
                raise RuntimeError(f"building the class archive {path} failed (exit {proc.returncode}): "
                                   + " | ".join(tail))
            os.replace(partial, path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            partial.unlink(missing_ok=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_streaming.class_archive", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("build", "option", "path"))
    parser.add_argument("--path", type=Path, default=None, help="the archive (default: under ~/.cache, keyed)")
    ns = parser.parse_args(argv)
    if ns.command == "build":
        print(build(ns.path))
    elif ns.command == "option":
        print(java_option(ns.path))
    else:
        print(ns.path or default_path())
    return 0


if __name__ == "__main__":
    sys.exit(main())

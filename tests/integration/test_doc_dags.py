"""The DAGs the docs' snippets define run under ``dag.test()`` against a real local stream (issue 34).

``tests/unit/test_doc_snippets.py`` runs every snippet of README.md and docs/ (a DAG snippet builds its DAG
there, and nothing more). Here a page's snippets run again, in order and in one namespace, with that
test's own reader and runner (:func:`snippets_of`, :func:`prelude_of`, :func:`run_pages`), in a child
process on the suite's Airflow metadata DB; then the DAGs the page defined run with ``dag.test()``, one
after the other, while a feeder writes the stream's input (the bundled jobs' and the script's JSON event
files, 250 or 20 a second, into the page's input dir). Airflow 3.3's ``dag.test()`` runs a DAG only
once the parse of the DAGs folder serialized it, so the same snippets, in the same order, are also
that child's DAGs folder's one file. Each run must succeed, every task of it too;
the test then stops every stream a DAG left running with the product's stop action, checks its driver
processes are gone, and reads the sink: it holds exactly the events fed - nothing lost across the DAGs'
stops, restarts and version changes, nothing duplicated.

**What is rewritten.** The pages use a real host's absolute paths: string literals beginning with
``/data/`` (checkpoints, control, input, output) and ``/opt/`` (the user's script) get a per-page temp
dir in front (``"/data/in"`` -> ``"<tmp>/data/in"``) - the test may not write to ``/data``. Nothing else
of a snippet changes. The health sensor polls every 2 s instead of the configured default 10 s
(``[airflow_streaming] health_poll_interval``, an Airflow setting of the run, not the snippet).

**What is run, and why not every DAG.** README's two DAGs (deploy >> progress sensor >> stop; its deploy
again - "a restart is simply another deploy" - with the sensor and stop marked successful by
``dag.test(mark_success_pattern=...)``; then compatibility gate >> stop v1 >> deploy v2, on the same
stream and checkpoint: the gate checks the live checkpoint, stop_v1 stops the running v1, v2 resumes what
v1 left) and own-job's complete example (deploy >> health sensor, with a script of the user's: the test
writes ``/opt/jobs/orders_enriched.py``, a small JSON-to-Parquet script with a named query and no
``checkpointLocation``, as that page's contract allows). Every other DAG-forming page is listed in
:data:`COVERED` with the reason it is not run here: they use the same operators as these (or the
upgrade operator, which ``test_compat_gate.py`` runs under ``airflow dags test``), and running each
would cost a driver start or three (~20 s each on these 2 cores), beyond this test's ~4 minute budget.
:func:`test_every_dag_of_the_docs_is_run_or_covered` fails when a page defines a DAG that is in neither
list, so a new DAG snippet is a decision. (docs/notifications.md's DAG snippet is a fragment - it sends
real Slack and e-mail notifications - so it builds no DAG, here or in test_doc_snippets.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from unit.test_doc_snippets import REPO, prelude_of, run_pages, snippets_of

#: page -> the DAGs its snippets define that this test runs, in the order they run, each with the tasks
#: that ``dag.test(mark_success_pattern=...)`` marks successful instead of running (None: run every task).
RUN: dict[str, list[tuple[str, str | None]]] = {
    "README.md": [
        ("events_etl_lifecycle", None),             # deploy v1, wait for 1000 rows, stop it
        ("events_etl_lifecycle", "^(wait|stop)$"),  # "a restart is simply another deploy": v1 runs again,
        ("events_etl_to_v2", None),                 # so the gate checks a live checkpoint and stop_v1 stops it
    ],
    "docs/own-job.md": [("orders_enriched_deploy", None)],
}

#: page -> DAG -> why it is not run here (and what runs the same thing).
COVERED: dict[str, dict[str, str]] = {
    "README.md": {
        "device_signals_hourly_report": "scheduled on an AssetWatcher, which dag.test() does not run: "
                                        "test_asset_completeness.py runs an hourly watcher on a real scheduler "
                                        "and triggerer; test_asset_hourly.py (long tier) the same over a real "
                                        "device_signals stream across a kill and an upgrade"},
    "docs/assets.md": {
        "orders_hourly_report": "scheduled on an AssetWatcher, which dag.test() does not run: "
                                "test_asset_completeness.py runs the same on a real scheduler and triggerer"},
    "docs/howto/compatibility-check.md": {
        "orders_to_v2": "the README's gate (run here) before SparkStreamUpgradeOperator, which "
                        "test_compat_gate.py runs behind the gate under `airflow dags test`"},
    "docs/howto/stop.md": {
        "orders_run_and_stop": "deploy >> stop: the README's lifecycle DAG's operators (run here), plus a "
                               "teardown stop of a stopped stream (a no-op, as README's events_etl_to_v2 does)"},
    "docs/howto/supervise.md": {
        "stream_supervisor": "a scheduled supervisor sending SMTP and HTTP notifications (no SMTP server "
                             "or `events_api` connection here); the supervisor pass: test_supervisor.py"},
    "docs/migrating-from-spark-submit.md": {
        "orders_deploy": "a deploy of a user's script: own-job's example (run here)",
        "orders_stop": "a stop: the README's lifecycle DAG's stop (run here)"},
}

PATHS = re.compile(r"""(?<=["'])/(data|opt)/""")

#: The script own-job's complete example deploys (``/opt/jobs/orders_enriched.py``): written by this test.
ORDERS_ENRICHED = '''
import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

parser = argparse.ArgumentParser()
parser.add_argument("--input", required=True)
parser.add_argument("--output", required=True)
args = parser.parse_args()

spark = SparkSession.builder.getOrCreate()
orders = (spark.readStream.schema("event_id string, device_id string, event_type string, ts string, signal double")
          .json(args.input).withColumn("device_group", F.substring("device_id", 1, 3)))
(orders.writeStream.queryName("orders_enriched").format("parquet").option("path", args.output)
 .trigger(processingTime="2 seconds").start().awaitTermination())
'''


def page_snippets(pages: list[str], root: Path | None) -> tuple[dict[str, list[dict]], dict[str, str | None]]:
    """The snippets of ``pages`` and of their preludes, with their ``/data/`` and ``/opt/`` literals put
    under ``root`` (unchanged when ``root`` is None)."""
    snippets: dict[str, list[dict]] = {}
    preludes: dict[str, str | None] = {}
    todo = list(pages)
    while todo:
        page = todo.pop()
        if page in snippets:
            continue
        found = [asdict(s) for s in snippets_of(REPO / page)]
        if root is not None:
            for s in found:
                s["code"] = PATHS.sub(lambda m: f"{root}/{m.group(1)}/", s["code"])
        snippets[page], preludes[page] = found, prelude_of(REPO / page)
        if preludes[page]:
            todo.append(preludes[page])
    return snippets, preludes


def run_child(job: dict, tmp: Path, timeout: float, dags_folder: Path | None = None) -> dict:
    """Run this file as the child on ``job`` (see :func:`child`); return its report."""
    work = tmp / f"job-{time.monotonic_ns()}.json"
    work.write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
           "AIRFLOW__AIRFLOW_STREAMING__HEALTH_POLL_INTERVAL": "2"}
    if dags_folder is not None:
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags_folder)
    proc = subprocess.run([sys.executable, __file__, str(work)], env=env, cwd=tmp, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child(work: Path) -> dict:
    """In the child: run the pages' snippets (collecting the DAGs each page defines), then ``dag.test()``
    the DAGs named in ``run``, in order."""
    import types

    from airflow.sdk.definitions._internal.contextmanager import DagContext

    job = json.loads(work.read_text())
    sys.modules["__snippet__"] = types.ModuleType("__snippet__")
    DagContext.current_autoregister_module_name = "__snippet__"  # every `with DAG(...)` is remembered
    failures: list[str] = []
    defined: dict[str, list[str]] = {}
    dags = {}
    for page in job["pages"]:
        before = {dag.dag_id for dag, _ in DagContext.autoregistered_dags}
        subset = {p: s for p, s in job["snippets"].items() if p == page or p == job["preludes"].get(page)}
        failures += run_pages(subset, job["preludes"])
        new = {dag.dag_id: dag for dag, _ in DagContext.autoregistered_dags if dag.dag_id not in before}
        defined[page] = sorted(new)
        dags.update(new)
    report: dict = {"failures": failures, "defined": defined, "runs": []}
    if failures:
        return report
    for dag_id, marked in job["run"]:
        dag = dags[dag_id]
        specs = []
        for task in dag.tasks:
            spec = getattr(task, "spec", None)
            if spec is not None:
                specs.append(spec if isinstance(spec, dict) else spec.to_dict())
        started = time.monotonic()
        run = dag.test(mark_success_pattern=marked)
        tis = run.get_task_instances()
        report["runs"].append({"dag_id": dag_id, "state": str(run.state), "specs": specs,
                               "tasks": {ti.task_id: str(ti.state) for ti in tis},
                               "xcom": {ti.task_id: ti.xcom_pull(task_ids=ti.task_id) for ti in tis},
                               "seconds": round(time.monotonic() - started, 1)})
    return report


def output_of(spec: dict) -> str:
    args = spec["application_args"]
    return args[args.index("--output") + 1]


def sink_ids(spec: dict) -> list[str]:
    """Every event id the stream's sink committed (with repeats, if any)."""
    from spark_jobs.outputs import committed_sink_files, read_etl_output

    out = output_of(spec)
    if spec["application"].startswith("events_etl"):
        return list(read_etl_output(out).event_ids.elements())
    import pyarrow.dataset as ds

    files = committed_sink_files(out)
    return ds.dataset(files, format="parquet").to_table(columns=["event_id"]).column("event_id").to_pylist() \
        if files else []


def gone(pid: int) -> bool:
    """No such process, or a zombie (it ran; an orphan's exit status waits for an init that may not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def stop_and_check(streams, spec: dict, fed: set[str]) -> None:
    """Stop the stream by the product's stop action; its driver gone; its sink exactly ``fed``."""
    from airflow_streaming.lifecycle.record import Action, Step
    from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner
    from airflow_streaming.spec import StreamSpec
    from streams import wait_for

    stream = StreamSpec.from_dict(spec)
    hook = streams.hook(stream)  # killed by pid at teardown if anything below fails
    record = hook.driver_record()
    assert record is not None and hook.alive(record), f"{stream.name}: no running driver after the DAGs"
    wait_for(lambda: set(sink_ids(spec)) >= fed, 120, f"{stream.name}: every fed event in the sink", interval=1)
    done = LifecycleRunner(stream, Action.STOP, LifecycleOptions(poll_s=0.5)).run()
    assert done.step == Step.SUCCEEDED, done.error
    assert not hook.alive(record) and not hook.processes_of_run(record.run_id), f"{stream.name}: a driver survived"
    assert record.submit_pid and gone(record.submit_pid), f"{stream.name}: driver pid {record.submit_pid} still runs"
    ids = sink_ids(spec)
    assert len(ids) == len(set(ids)), f"{stream.name}: duplicated in the sink: {len(ids) - len(set(ids))}"
    assert set(ids) == fed, f"{stream.name}: lost {len(fed - set(ids))}, unexpected {len(set(ids) - fed)}"


def run_page_dags(page: str, root: Path, tmp: Path, feed_dir: Path, per_file: int) -> tuple[dict, set[str]]:
    """Run ``page``'s DAGs (RUN) in a child while a feeder writes ``per_file`` events a second into
    ``feed_dir``; return the child's report and the ids fed."""
    from signals import Feeder
    from spark_jobs.event_generator import event_id_for

    snippets, preludes = page_snippets([page], root)
    run = page.replace("/", "-").replace(".", "-")
    # Airflow 3.3's dag.test() runs a DAG only once the DAGs folder's parse serialized it: the same
    # snippets (the prelude's, then the page's; fragments left out), in order, are that folder's one file.
    dags_folder = tmp / f"dags-{run}"
    dags_folder.mkdir()
    chain = [p for p in (preludes[page], page) if p]
    (dags_folder / f"{run.replace('-', '_')}.py").write_text(
        "\n".join(s["code"] for p in chain for s in snippets[p] if not s["kind"]))
    feeder = Feeder(str(feed_dir), per_file=per_file, interval=1.0, run=run)
    feeder.feed(per_file)
    feeder.start()
    try:
        report = run_child({"pages": [page], "snippets": snippets, "preludes": preludes, "run": RUN[page]}, tmp,
                           timeout=900, dags_folder=dags_folder)
    finally:
        last = feeder.stop()
    assert report["failures"] == [], "\n".join(report["failures"])
    for dag_run in report["runs"]:
        assert dag_run["state"] == "success" and set(dag_run["tasks"].values()) == {"success"}, dag_run
    return report, {event_id_for(run, seq) for seq in range(last + 1)}


# ----------------------------------------------------------------------------------------------- tests


def test_every_dag_of_the_docs_is_run_or_covered(tmp_path):
    """Every DAG a page's snippets define is run by the test below or listed, with its reason, in COVERED."""
    pages = [str(p.relative_to(REPO)) for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]]
    snippets, preludes = page_snippets(pages, None)
    report = run_child({"pages": pages, "snippets": snippets, "preludes": preludes, "run": []}, tmp_path, 300)
    assert report["failures"] == [], "\n".join(report["failures"])
    defined = {page: dag_ids for page, dag_ids in report["defined"].items() if dag_ids}
    expected = {page: sorted({*(dag_id for dag_id, _ in RUN.get(page, [])), *COVERED.get(page, {})})
                for page in {*RUN, *COVERED}}
    assert defined == expected
    assert all(all(COVERED[p].values()) for p in COVERED)


@pytest.mark.spark
@pytest.mark.airflow
def test_the_readme_and_own_job_dags_run_against_a_real_stream(streams, airflow_db, tmp_path):
    started = time.monotonic()
    # README: deploy >> wait (1000 rows) >> stop, then gate >> stop_v1 >> deploy_v2; v2 left running.
    root = tmp_path / "readme"
    report, fed = run_page_dags("README.md", root, tmp_path, root / "data" / "in", per_file=250)
    lifecycle, redeploy, upgrade = report["runs"]
    assert [s["version"] for s in lifecycle["specs"]] == ["v1"] * 3
    assert lifecycle["xcom"]["wait"]["input_rows"] >= 1000 and lifecycle["xcom"]["stop"]["was_running"]
    assert lifecycle["xcom"]["stop"]["graceful"]
    assert redeploy["xcom"]["deploy"]["run_id"] != lifecycle["xcom"]["deploy"]["run_id"]
    assert [s["application"] for s in upgrade["specs"]] == ["events_etl_v2", "events_etl", "events_etl_v2"]
    # the gate passed the live checkpoint; stop_v1 stopped the redeployed v1 gracefully; v2 runs.
    assert upgrade["xcom"]["gate"]["verdict"] == "COMPATIBLE", upgrade["xcom"]["gate"]
    assert upgrade["xcom"]["stop_v1"]["was_running"] and upgrade["xcom"]["stop_v1"]["graceful"], upgrade["xcom"]
    assert upgrade["xcom"]["deploy_v2"]["version"] == "v2", upgrade["xcom"]
    print(f"README DAGs: {[(r['dag_id'], r['seconds']) for r in report['runs']]}")
    stop_and_check(streams, upgrade["specs"][-1], fed)

    # own-job's complete example: the user's script (written here), deploy >> healthy; left running.
    root = tmp_path / "own-job"
    script = root / "opt" / "jobs" / "orders_enriched.py"
    script.parent.mkdir(parents=True)
    script.write_text(ORDERS_ENRICHED)
    report, fed = run_page_dags("docs/own-job.md", root, tmp_path, root / "data" / "in" / "orders", per_file=20)
    (deploy,) = report["runs"]
    assert deploy["specs"][0]["application"] == str(script)
    assert deploy["xcom"]["healthy"]["state"] == "HEALTHY", deploy["xcom"]
    stop_and_check(streams, deploy["specs"][0], fed)
    print(f"doc DAGs: {[(r['dag_id'], r['seconds']) for r in report['runs']]}, total "
          f"{time.monotonic() - started:.0f}s")


if __name__ == "__main__":  # the child: run the job given in the JSON file, print the report as JSON
    print(json.dumps(child(Path(sys.argv[1])), default=str))

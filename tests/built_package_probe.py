"""Run INSIDE a fresh virtualenv holding only the built wheel (no checkout on sys.path): ``python -I
built_package_probe.py WORKDIR``. Used by tests/integration/test_built_package.py; prints one JSON object.

Checks what a user of the installed package meets before any Spark runs: the package is the installed
one, its version is the same everywhere, every module imports, Airflow discovers the provider and the
plugin, the Streams UI serves its static files, ``py.typed`` ships. With only pyspark-client installed (no
``pyspark`` extra) it also checks that a deploy and the compatibility check refuse, naming the extra.
Exits non-zero with the reason on the first failed check.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path

#: Modules that import an optional extra's package (slack, http, openlineage): importable only with that extra.
OPTIONAL = {"airflow_streaming.notifications.slack_provider": "airflow.providers.slack",
            "airflow_streaming.notifications.http_provider": "airflow.providers.http",
            "airflow_streaming.operators.lineage_facets": "openlineage"}


def check(condition: object, what: str) -> None:
    if not condition:
        print(f"BUILT PACKAGE CHECK FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def installed(dist: str) -> bool:
    try:
        version(dist)
    except PackageNotFoundError:
        return False
    return True


def imports_of_every_module() -> dict[str, str]:
    import airflow_streaming
    import spark_jobs

    failed = {}
    for package in (airflow_streaming, spark_jobs):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            try:
                importlib.import_module(module.name)
            except ModuleNotFoundError as exc:
                if not (exc.name or "").startswith(OPTIONAL.get(module.name, "\0")):
                    failed[module.name] = repr(exc)
            except Exception as exc:  # noqa: BLE001 - reported, the caller fails
                failed[module.name] = repr(exc)
    return failed


def ui_static_files() -> dict[str, int]:
    from starlette.testclient import TestClient

    from airflow_streaming.ui.api import create_app

    client = TestClient(create_app())
    sizes = {}
    for path in ("/ui/", "/static/app.js", "/static/app.css", "/static/icon.svg",
                 "/static/vendor/echarts.common.min.js"):
        response = client.get(path)
        check(response.status_code == 200 and response.content, f"the Streams UI serves {path}: {response.status_code}")
        sizes[path] = len(response.content)
    return sizes


def client_only_refusals(work: Path) -> dict[str, str]:
    """With pyspark-client only: a local deploy and the compatibility check refuse and name the extra."""
    from airflow_streaming.exceptions import ApplicationNotFoundError
    from airflow_streaming.hooks.streaming_job import SparkStreamHook
    from airflow_streaming.pyspark_install import full_pyspark_missing
    from airflow_streaming.spec import StreamSpec

    check(full_pyspark_missing(), "full_pyspark_missing() sees the full PySpark in a pyspark-client-only venv")
    spec = {"name": "client-only", "application": "events_etl", "master": "local[1]",
            "checkpoint_location": str(work / "ckpt"), "control_location": str(work / "control"),
            "application_args": ["--input", str(work / "in"), "--output", str(work / "out"),
                                 "--quarantine", str(work / "q")]}
    hook = SparkStreamHook(StreamSpec.from_dict(spec))
    try:
        from airflow_streaming.lifecycle.operations import deploy_stream

        deploy_stream(hook.spec)  # the product's deploy: refused before its lock, record or submission
    except ApplicationNotFoundError as exc:
        deploy = str(exc)
    else:
        check(False, "a local deploy with only pyspark-client was submitted")
    check('"airflow-streaming[pyspark]"' in deploy and "nothing was submitted" in deploy, deploy)
    check(hook.driver_record() is None, "a driver record was written by the refused deploy")
    gate = subprocess.run([sys.executable, "-m", "airflow_streaming.compat", "--json", "--checkpoint",
                           str(work / "ckpt"), "--application", "events_etl"], capture_output=True, text=True,
                          timeout=300, cwd=work)
    error = json.loads(gate.stdout or "{}").get("error", "") if gate.returncode == 3 else gate.stdout + gate.stderr
    check('"airflow-streaming[pyspark]"' in error, f"the compatibility check names the extra: {error[-2000:]}")
    return {"deploy": deploy, "gate": error}


def main(work: Path) -> dict[str, object]:
    import airflow_streaming
    from airflow_streaming.get_provider_info import get_provider_info

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    where = Path(airflow_streaming.__file__).resolve()
    check(where.is_relative_to(site), f"airflow_streaming imported from {where}, not from {site}")
    check((where.parent / "py.typed").is_file(), "airflow_streaming/py.typed is missing")
    ver = airflow_streaming.__version__
    check(version("airflow-streaming") == ver == get_provider_info()["versions"][0],
          f"versions differ: metadata {version('airflow-streaming')}, __version__ {ver}, "
          f"provider info {get_provider_info()['versions']}")

    failed = imports_of_every_module()
    check(not failed, f"modules that do not import from the wheel: {failed}")

    from airflow.providers_manager import ProvidersManager

    provider = ProvidersManager().providers.get("airflow-streaming")
    check(provider is not None and provider.version == ver, f"Airflow does not discover the provider: {provider}")
    plugins = [ep for ep in entry_points(group="airflow.plugins") if ep.name == "airflow_streaming"]
    check(len(plugins) == 1 and plugins[0].load().__name__ == "StreamingPlugin", f"plugin entry point: {plugins}")

    result: dict[str, object] = {"version": ver, "location": str(where), "ui": ui_static_files(),
                                 "pyspark": installed("pyspark"), "pyspark_client": installed("pyspark-client")}
    check(result["pyspark_client"], "pyspark-client is not installed (a base dependency)")
    if not result["pyspark"]:
        check(not (Path(sys.executable).parent / "spark-submit").exists(), "spark-submit without the pyspark extra")
        result["refusals"] = client_only_refusals(work)
    return result


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))

"""The package as a user gets it: the sdist and the wheel are built from the tracked tree, checked (twine,
check-wheel-contents, their file lists, the metadata), and the BUILT wheel - not this checkout - is
installed into a fresh virtualenv where the README's example DAG runs a real stream.

What each archive must carry is written in docs/packaging.md. A file missing from the wheel (spark_jobs/,
the UI's static files, py.typed) fails the file-list test and the installed-wheel test; a file the sdist
lacks fails the sdist test (and the DAG run, which takes its DAG from the unpacked sdist).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from email import message_from_string
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "built_package_probe.py"
#: Tracked files the sdist leaves out (docs/packaging.md): the CI entry and the ignore files.
NOT_IN_SDIST = re.compile(r"^(\.ci/|\.gitignore$|\.dockerignore$)")
#: Files setuptools adds to every sdist.
SDIST_GENERATED = re.compile(r"^(PKG-INFO|setup\.cfg|[^/]+\.egg-info/.*)$")
PACKAGES = ("airflow_streaming/", "spark_jobs/")
MARKDOWN_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def _version() -> str:
    text = (REPO / "airflow_streaming" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE).group(1)


def _source_files() -> list[str]:
    """The files a clean checkout of this tree has: tracked or new, not ignored, not deleted."""
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                             capture_output=True, timeout=60).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout ({exc}): the archives are compared with the tracked files")
    return sorted(name for name in out.split("\0") if name and (REPO / name).is_file())


def _run(argv: list[str], timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{argv[:4]} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module", autouse=True)
def _uv_cache_pruned():
    """uv keeps each fresh build of pyspark's sdist (about 1 GB) as a new cache revision on this network: a
    full run once filled the disk with them (CI failed with ENOSPC). Prune what nothing uses any more."""
    yield
    subprocess.run([sys.executable, "-m", "uv", "cache", "prune", "--quiet"], capture_output=True, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> SimpleNamespace:
    """Build the sdist and, from it, the wheel (``uv build``) out of a copy of the tracked tree."""
    root = tmp_path_factory.mktemp("built-package")
    source, out = root / "source", root / "dist"
    files = _source_files()
    for name in files:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    _run([sys.executable, "-m", "uv", "build", "--quiet", "--out-dir", str(out), str(source)])
    version = _version()
    sdist, wheel = out / f"airflow_streaming-{version}.tar.gz", out / f"airflow_streaming-{version}-py3-none-any.whl"
    assert sdist.is_file() and wheel.is_file(), sorted(p.name for p in out.iterdir())
    with zipfile.ZipFile(wheel) as archive:
        wheel_names = archive.namelist()
        metadata = archive.read(f"airflow_streaming-{version}.dist-info/METADATA").decode()
    with tarfile.open(sdist) as archive:
        prefix = f"airflow_streaming-{version}/"
        sdist_names = [m.name.removeprefix(prefix) for m in archive.getmembers() if m.isfile()]
    return SimpleNamespace(root=root, sdist=sdist, wheel=wheel, version=version, files=files,
                           wheel_names=wheel_names, sdist_names=sdist_names, metadata=metadata)


def test_the_sdist_carries_the_tracked_tree(built):
    expected = {name for name in built.files if not NOT_IN_SDIST.match(name)}
    carried = {name for name in built.sdist_names if not SDIST_GENERATED.match(name)}
    assert carried == expected, {"missing": sorted(expected - carried), "unexpected": sorted(carried - expected)}
    assert {"LICENSE", "NOTICE", "CHANGELOG.md", "dags/streaming_lifecycle_demo.py", "constraints.txt"} <= carried


def test_the_wheel_carries_every_package_file_and_the_licenses(built):
    dist_info = f"airflow_streaming-{built.version}.dist-info/"
    expected = {name for name in built.files if name.startswith(PACKAGES)}
    carried = {name for name in built.wheel_names if not name.startswith(dist_info)}
    assert carried == expected, {"missing": sorted(expected - carried), "unexpected": sorted(carried - expected)}
    assert {"airflow_streaming/py.typed", "spark_jobs/py.typed", "airflow_streaming/ui/static/index.html",
            "airflow_streaming/ui/static/vendor/echarts.common.min.js", "spark_jobs/runtime/launcher.py"} <= carried
    assert {dist_info + "licenses/LICENSE", dist_info + "licenses/NOTICE"} <= set(built.wheel_names)


def test_the_metadata_is_what_a_release_needs(built):
    meta = message_from_string(built.metadata)
    assert meta["Version"] == built.version and meta["Metadata-Version"] == "2.4"
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE", "NOTICE"]
    assert not [c for c in meta.get_all("Classifier") if c.startswith("License ::")]  # PEP 639: the expression only
    assert {"Framework :: Apache Airflow", "Framework :: Apache Airflow :: Provider",
            "Typing :: Typed"} <= set(meta.get_all("Classifier"))
    assert meta["Keywords"] and meta["Description-Content-Type"] == "text/markdown"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) >= {"Source", "Documentation", "Changelog", "Issues"}
    # The test needs are a dependency group, not a published extra; PySpark's JVM half is the `pyspark` extra.
    extras = set(meta.get_all("Provides-Extra"))
    assert "test" not in extras and "pyspark" in extras, extras
    requires = meta.get_all("Requires-Dist")
    assert not [r for r in requires if re.match(r"(pytest|calfkit|twine|uv|check-wheel)", r)], requires
    assert "pyspark-client<5,>=4.0.0" in requires and 'pyspark<5,>=4.0.0; extra == "pyspark"' in requires


def test_twine_and_check_wheel_contents_pass(built):
    out = _run([sys.executable, "-m", "twine", "check", "--strict", str(built.sdist), str(built.wheel)]).stdout
    assert out.count("PASSED") == 2, out
    out = _run([sys.executable, "-m", "check_wheel_contents", "--config", str(REPO / "pyproject.toml"),
                str(built.wheel)]).stdout
    assert out.strip().endswith(": OK"), out


def test_the_long_description_links_point_at_the_repository(built):
    description = message_from_string(built.metadata).get_payload()
    readme = (REPO / "README.md").read_text()
    source = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Source"]
    owner_repo = source.removeprefix("https://github.com/")
    relative = [m for m in MARKDOWN_LINK.findall(readme) if not re.match(r"[a-z]+:", m[2])]
    assert len(relative) > 20  # the README itself keeps its relative links
    published = MARKDOWN_LINK.findall(description)
    assert len(published) == len(MARKDOWN_LINK.findall(readme))
    assert not [m for m in published if not m[2].startswith("https://")], "relative links left on PyPI"
    for (bang, _, target), (_, _, url) in zip(MARKDOWN_LINK.findall(readme), published):
        if re.match(r"[a-z]+:", target):
            assert url == target
            continue
        path = ("README.md" + target) if target.startswith("#") else target
        if bang:
            assert url == f"https://raw.githubusercontent.com/{owner_repo}/v{built.version}/{path}"
        else:
            assert url == f"{source}/blob/v{built.version}/{path}"
        assert path.split("#")[0] in built.files, f"the README links {path}, which is not in the repository"


def test_the_version_is_written_once():
    version = _version()
    literal = re.compile(r"""["']""" + re.escape(version) + r"""["']""")
    sources = [REPO / "pyproject.toml", REPO / "setup.py", *REPO.glob("airflow_streaming/**/*.py"),
               *REPO.glob("spark_jobs/**/*.py")]
    written = [str(p.relative_to(REPO)) for p in sources if literal.search(p.read_text())]
    assert written == ["airflow_streaming/__init__.py"], written
    assert f"## [{version}]" in (REPO / "CHANGELOG.md").read_text()


def _fresh_env(venv: Path, home: Path, dags: Path, root: Path) -> dict[str, str]:
    """This process's environment pointed at the fresh venv: no checkout on any path, no suite-only JVM options."""
    ours = os.path.dirname(sys.executable)
    path = [str(venv / "bin")] + [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != ours]
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "VIRTUAL_ENV", "SPARK_HOME", "SPARK_SUBMIT_OPTS", "PYSPARK_DRIVER_PYTHON"}}
    env.update(PATH=os.pathsep.join(path), PYSPARK_PYTHON=str(venv / "bin" / "python"), AIRFLOW_HOME=str(home),
               AIRFLOW__CORE__DAGS_FOLDER=str(dags), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW_STREAMING_DEMO_ROOT=str(root))
    return env


def _probe(python: Path, work: Path, env: dict[str, str]) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    proc = _run([str(python), "-I", str(PROBE), str(work)], env=env, cwd=work, timeout=600)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.spark
@pytest.mark.airflow
def test_the_built_wheel_runs_the_example_dag(built, tmp_path):
    """pyspark-client only: everything imports, the UI serves, a deploy and the gate name the extra; with the
    `pyspark` extra: the README's lifecycle demo DAG (from the unpacked sdist) runs exactly once."""
    venv, home, root = tmp_path / "venv", tmp_path / "airflow-home", tmp_path / "demo"
    started, seconds = time.monotonic(), {}  # printed at the end (pytest -s): where the test's time goes

    def lap(what: str) -> None:
        seconds[what] = round(time.monotonic() - started - sum(seconds.values()), 1)
    with tarfile.open(built.sdist) as archive:
        archive.extractall(tmp_path / "sdist", filter="data")
    dags = tmp_path / "sdist" / f"airflow_streaming-{built.version}" / "dags"
    env = _fresh_env(venv, home, dags, root)
    python = venv / "bin" / "python"
    uv = [sys.executable, "-m", "uv"]
    _run([*uv, "venv", "--quiet", "--python", sys.executable, str(venv)], env=env)
    install = [*uv, "pip", "install", "--quiet", "--python", str(python), "-c", str(REPO / "constraints.txt")]

    def _install(requirement: str) -> None:
        """From uv's cache first (what ./scripts/setup_env.sh just installed, at the same pinned versions): pyspark
        ships only an sdist, and online uv builds it again, ~30 s and ~1.5 GB of cache each time on this network
        (0.3 s from the cache). Online when the cache lacks something."""
        offline = subprocess.run([*install, "--offline", requirement], env=env, capture_output=True, text=True,
                                 timeout=600)
        if offline.returncode != 0:
            _run([*install, requirement], env=env)
    _install(str(built.wheel))
    lap("fresh venv, the wheel without extras")

    base = _probe(python, tmp_path / "probe-base", env)
    assert base["location"].startswith(str(venv)) and base["version"] == built.version
    assert base["pyspark"] is False and base["pyspark_client"] is True
    assert "spark-submit is not on PATH" in base["refusals"]["deploy"]
    assert "the compatibility check starts Spark" in base["refusals"]["gate"]
    lap("probe, pyspark-client only")

    _install(f"{built.wheel}[pyspark]")
    assert (venv / "bin" / "spark-submit").exists()
    lap("the pyspark extra")
    assert _probe(python, tmp_path / "probe-full", env)["pyspark"] is True
    lap("probe, full pyspark")

    airflow = [str(python), "-m", "airflow"]
    _run([*airflow, "db", "migrate"], env=env, cwd=tmp_path, timeout=300)
    lap("airflow db migrate")
    try:
        run = subprocess.run([*airflow, "dags", "test", "streaming_lifecycle_demo"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
        lap("airflow dags test streaming_lifecycle_demo")
        # the driver ran the wheel's spark-submit and runtime, not this checkout's
        command = json.loads((root / "control" / "events-etl-demo" / "driver.json").read_text())["command"]
        assert shutil.which("spark-submit", path=env["PATH"]) == str(venv / "bin" / "spark-submit")
        site = f"{venv}/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
        assert f"{site}/spark_jobs/launch.py " in command, command
        assert str(REPO) not in command, command
        summary = json.loads((root / "summary.json").read_text())
        assert summary["exactly_once"] and summary["duplicates"] == summary["missing"] == 0
        assert [p["rows_out"] for p in summary["phases"]] == [p["valid_in"] for p in summary["phases"]] == [1500, 1000]
        assert summary["quarantined_total"] == 20
        assert all(s["graceful"] and s["clean"] for s in summary["stops"])
        assert summary["restart_continued_at_batch"] == summary["stops"][0]["last_committed_batch"] + 1
        # the downstream DAG's report ran once per hour closed by the stream's watermark (the watcher's trigger,
        # run by the demo in place of the triggerer): events of hours 00-03 in sequence order, the last
        # committed watermark in hour 02, so hours 00 and 01 are closed, each with its 750 events in the sink
        reports = sorted((json.loads(f.read_text()) for f in (root / "reports").iterdir()), key=lambda r: r["identity"])
        assert [r["identity"] for r in reports] == [
            f"2026-01-01T0{h}:00:00.000Z/2026-01-01T0{h + 1}:00:00.000Z" for h in (0, 1)]
        assert [r["sink_rows_in_hour"] for r in reports] == [750, 750]
        assert all(r["input_rows"] for r in reports)
        periods = (root / "periods.txt").read_text()
        assert periods.count("[demo] downstream events_etl_demo_periods_report ran for hour") == len(reports)
    finally:
        subprocess.run([str(python), "-m", "airflow_streaming.stop_all", str(root / "control")], env=env,
                       cwd=tmp_path, capture_output=True, timeout=120)
        _stop_processes_of(venv)
        print(f"built-package test, seconds: {seconds}")


def _stop_processes_of(venv: Path) -> None:
    """Fail (after killing them, by pid) if processes of the fresh venv outlived stop_all."""
    import psutil

    def leftovers() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and str(venv) in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        return found

    _, alive = psutil.wait_procs(leftovers(), timeout=30)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    assert not alive, f"processes of the fresh venv outlived stop_all: {[p.pid for p in alive]}"

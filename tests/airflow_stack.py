"""A real Airflow for end-to-end tests: throwaway PostgreSQL, ``airflow db migrate`` and the four services.

Use the module-scoped ``airflow_stack`` fixture (configure it with an ``airflow_stack_options`` fixture in
your test module) or the :func:`running_stack` context manager::

    from airflow_stack import AirflowStack, StackOptions, airflow_stack  # noqa: F401 (the fixture)

    @pytest.fixture(scope="module")
    def airflow_stack_options(tmp_path_factory):
        dags = tmp_path_factory.mktemp("dags")
        (dags / "my_dag.py").write_text(...)
        return StackOptions(dags_folder=str(dags), env={"MY_SETTING": "x"})

    def test_it(airflow_stack: AirflowStack):
        run_id = airflow_stack.trigger("my_dag", conf={"a": 1})
        assert airflow_stack.wait_for_run("my_dag", run_id) == "success"

What it starts (every process in its own session, stopped by pid - process group - at the end, also
when the test fails or start-up fails half way):

- PostgreSQL from Debian's ``postgresql`` package (``scripts/setup_env.sh`` installs it): ``initdb`` into
  a temp dir (as the ``postgres`` user when run as root), ``pg_ctl start`` on a free loopback port;
- ``airflow db migrate`` on it;
- ``airflow api-server`` (one worker), ``scheduler`` (LocalExecutor, parallelism 4 by default),
  ``dag-processor`` and ``triggerer``, with their output in ``<root>/logs/<service>.log``;
- the simple auth manager with users ``admin`` (ADMIN) and ``viewer`` (VIEWER) by default, whose
  passwords are in :attr:`AirflowStack.passwords` (log in through ``/auth/login`` or get a JWT with
  :meth:`AirflowStack.token`).

The services import the checkout under test (``PYTHONPATH``), with its own entry points even when the
installed package metadata is older than the checkout (see :func:`metadata_overlay`).

Measured on the project's machine (2 cores, 24 GiB), nothing else running: PostgreSQL initdb + start
1.0 s, ``db migrate`` 6.8 s, the four services healthy 18.4 s later: **26 s** from nothing to a healthy
stack (:attr:`AirflowStack.timings` has each run's figures; they are printed at start). With other test
suites loading the machine (load average 10) it took 39.5 s and 94 s. Stopping: 5-20 s. Skipped with the
reason when PostgreSQL or the Python drivers are not installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
HEALTH_COMPONENTS = {"scheduler": "scheduler", "triggerer": "triggerer", "dag-processor": "dag_processor"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bindir() -> str | None:
    """Debian's PostgreSQL server binaries (newest version), ``None`` if not installed."""
    base = Path("/usr/lib/postgresql")
    found = sorted((p for p in base.glob("*/bin") if (p / "initdb").exists()), key=lambda p: int(p.parent.name)
                   if p.parent.name.isdigit() else 0) if base.exists() else []
    if found:
        return str(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def missing_requirements() -> str | None:
    """Why the stack cannot run here (``None`` if it can)."""
    if postgres_bindir() is None:
        return "PostgreSQL server is not installed (apt-get install -y postgresql; scripts/setup_env.sh does it)"
    for module in ("psycopg2", "asyncpg"):
        try:
            __import__(module)
        except ImportError:
            return f"the Python package {module} is missing (the `test` dependency group: scripts/setup_env.sh)"
    return None


def stop_process_group(proc: subprocess.Popen[Any], name: str, timeout: float = 30.0) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL what is left. Never raises."""
    if proc.poll() is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # children it may have left behind
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            print(f"[airflow-stack] {name} (pid {proc.pid}) ignored {sig.name}", file=sys.stderr)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class PostgresCluster:
    """A throwaway PostgreSQL cluster on a free loopback port (trust auth, fsync off)."""

    def __init__(self, user: str = "airflow", database: str = "airflow"):
        self.bindir = postgres_bindir()
        if self.bindir is None:
            raise RuntimeError(missing_requirements() or "no PostgreSQL")
        self.user, self.database = user, database
        self.port = free_port()
        # Not under pytest's tmp dir: it must be reachable by the `postgres` user when we are root.
        self.dir = tempfile.mkdtemp(prefix="airflow-stack-pg-")
        self.data = os.path.join(self.dir, "data")
        self.as_postgres = os.geteuid() == 0
        self.started = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *argv: str) -> None:
        cmd = (["runuser", "-u", "postgres", "--"] if self.as_postgres else []) + list(argv)
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        os.chmod(self.dir, 0o755)
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(f"{self.bindir}/initdb", "-D", self.data, "-U", self.user, "--auth=trust", "--no-sync", "-E", "UTF8")
        self._run(f"{self.bindir}/pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "postgres.log"), "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                  "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200", "-w", "start")
        self.started = True
        subprocess.run([f"{self.bindir}/createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
                        self.database], check=True, capture_output=True, timeout=60)

    def stop(self) -> None:
        """Stop the server (fast, then by the postmaster's pid) and delete the cluster. Never raises."""
        if self.started:
            try:
                self._run(f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", "20", "stop")
            except Exception:  # noqa: BLE001 - fall back to the pid
                with contextlib.suppress(Exception):
                    pid = int(Path(self.data, "postmaster.pid").read_text().split()[0])
                    os.kill(pid, signal.SIGKILL)
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)


def metadata_overlay(root: Path) -> str | None:
    """A ``*.dist-info`` of this checkout for the services' ``PYTHONPATH`` when the installed one is stale.

    A developer's shared virtualenv may hold an editable install made from another checkout, whose
    entry points (``airflow.plugins``, ``apache_airflow_provider``) differ from the code under test.
    Python keeps the first distribution of a name on ``sys.path``, so a directory holding this
    checkout's metadata, placed before site-packages, makes the services load this checkout's entry
    points. Returns that directory, or ``None`` when the installed metadata already matches."""
    import importlib.metadata as md

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: use the installed metadata as it is
        return None
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {(group, name, value) for group, eps in project.get("entry-points", {}).items()
              for name, value in eps.items()}
    try:
        installed = {(ep.group, ep.name, ep.value) for ep in md.distribution(project["name"]).entry_points}
    except md.PackageNotFoundError:
        installed = set()
    if wanted <= installed:
        return None
    site = root / "metadata-overlay"
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = []
    for group, eps in project.get("entry-points", {}).items():
        lines += [f"[{group}]"] + [f"{name} = {value}" for name, value in eps.items()] + [""]
    (info / "entry_points.txt").write_text("\n".join(lines))
    print(f"[airflow-stack] installed metadata of {project['name']} lacks this checkout's entry points: "
          f"services read them from {site}", file=sys.stderr)
    return str(site)


@dataclass
class StackOptions:
    """What a test wants from the stack."""

    dags_folder: str | None = None
    """The DAGs the dag-processor parses (default: an empty folder)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for every service (``AIRFLOW__SECTION__KEY`` settings included)."""
    users: dict[str, str] = field(default_factory=lambda: {"admin": "ADMIN", "viewer": "VIEWER"})
    """Simple auth manager users: name -> role."""
    services: tuple[str, ...] = SERVICES
    parallelism: int = 4
    startup_timeout: float = 240.0


class AirflowStack:
    """PostgreSQL + Airflow services for one test module (see the module docstring)."""

    def __init__(self, root: Path, options: StackOptions | None = None):
        self.root = Path(root)
        self.options = options or StackOptions()
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.home = self.root / "airflow-home"
        self.logs = self.root / "logs"
        self.passwords = {user: secrets.token_urlsafe(12) for user in self.options.users}
        self.postgres: PostgresCluster | None = None
        self.processes: dict[str, subprocess.Popen[Any]] = {}
        self.timings: dict[str, float] = {}
        self._tokens: dict[str, str] = {}
        self.env: dict[str, str] = {}

    # ------------------------------------------------------------------ lifecycle
    def _environment(self) -> dict[str, str]:
        dags = self.options.dags_folder or str(self.root / "dags")
        Path(dags).mkdir(parents=True, exist_ok=True)
        pw_file = self.root / "passwords.json"
        pw_file.write_text(json.dumps(self.passwords))
        overlay = metadata_overlay(self.root)
        bindir = os.path.dirname(sys.executable)
        pythonpath = [str(REPO)] + ([overlay] if overlay else []) + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        assert self.postgres is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "AIRFLOW_HOME"}
        env.update({
            "AIRFLOW_HOME": str(self.home), "PYTHONPATH": os.pathsep.join(pythonpath),
            "PATH": bindir + os.pathsep + env.get("PATH", ""), "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": env.get("SPARK_LOCAL_IP", "127.0.0.1"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.postgres.url,
            "AIRFLOW__AIRFLOW_STREAMING__CONTROL_SEAL_KEY": os.environ.get("AIRFLOW__AIRFLOW_STREAMING__CONTROL_SEAL_KEY", ""),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(self.options.parallelism),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": dags,
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in self.options.users.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(pw_file),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.base_url, "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16), "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5", "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR": "True",
            "AIRFLOW__TRIGGERER__CAPACITY": "50",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        })
        env.update(self.options.env)
        return env

    def start(self) -> AirflowStack:
        """Start everything and wait until the API reports every service healthy (stops it all on failure)."""
        started = time.monotonic()
        try:
            self.postgres = PostgresCluster()
            self.postgres.start()
            self.timings["postgres_s"] = round(time.monotonic() - started, 1)
            self.home.mkdir(parents=True, exist_ok=True)
            self.logs.mkdir(parents=True, exist_ok=True)
            self.env = self._environment()
            t = time.monotonic()
            migrate = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=self.env,
                                     capture_output=True, text=True, timeout=300, cwd=self.root)
            if migrate.returncode != 0:
                raise RuntimeError(f"airflow db migrate failed:\n{migrate.stdout[-3000:]}\n{migrate.stderr[-3000:]}")
            self.timings["migrate_s"] = round(time.monotonic() - t, 1)
            t = time.monotonic()
            for service in self.options.services:
                self._start_service(service)
            self.wait_healthy(self.options.startup_timeout)
            self.timings["services_s"] = round(time.monotonic() - t, 1)
            self.timings["total_s"] = round(time.monotonic() - started, 1)
            print(f"[airflow-stack] up at {self.base_url} in {self.timings}", file=sys.stderr)
            return self
        except BaseException:
            self.stop()
            raise

    def _start_service(self, service: str) -> subprocess.Popen[Any]:
        args = ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"] if service == "api-server" else []
        log = open(self.logs / f"{service}.log", "ab")  # noqa: SIM115 - closed with the process
        self.processes[service] = subprocess.Popen(
            [sys.executable, "-m", "airflow", service, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=self.root, start_new_session=True)
        log.close()
        return self.processes[service]

    def restart(self, service: str) -> tuple[int, int]:
        """Stop one service (SIGTERM to its process group, by pid, SIGKILL after 30 s) and start it again;
        returns ``(old pid, new pid)``. Its log keeps growing in the same file."""
        old = self.processes[service]
        stop_process_group(old, service)
        return old.pid, self._start_service(service).pid

    def stop(self) -> None:
        """Stop every service (process group, by pid) and PostgreSQL. Never raises; safe to call twice."""
        t = time.monotonic()
        for name, proc in reversed(list(self.processes.items())):
            stop_process_group(proc, name)
        self.processes.clear()
        if self.postgres is not None:
            self.postgres.stop()
            self.postgres = None
        self.timings["stop_s"] = round(time.monotonic() - t, 1)

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise RuntimeError(f"airflow {name} exited with code {proc.returncode}:\n{self.log_tail(name)}")

    def wait_healthy(self, timeout: float) -> dict[str, Any]:
        import httpx

        deadline = time.monotonic() + timeout
        wanted = [HEALTH_COMPONENTS[s] for s in self.options.services if s in HEALTH_COMPONENTS]
        last: Any = None
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                last = httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).json()
                if last.get("metadatabase", {}).get("status") == "healthy" and all(
                        (last.get(c) or {}).get("status") == "healthy" for c in wanted):
                    return last
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(1)
        raise TimeoutError(f"Airflow not healthy after {timeout:.0f}s (last health: {last}); api-server log:\n"
                           f"{self.log_tail('api-server')}")

    def log_tail(self, service: str, lines: int = 60) -> str:
        path = self.logs / f"{service}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"

    # ------------------------------------------------------------------ REST API
    def token(self, user: str = "admin") -> str:
        """A JWT for ``user`` from the simple auth manager (``POST /auth/token``)."""
        import httpx

        if user not in self._tokens:
            resp = httpx.post(f"{self.base_url}/auth/token", json={"username": user, "password": self.passwords[user]},
                              timeout=30)
            resp.raise_for_status()
            self._tokens[user] = resp.json()["access_token"]
        return self._tokens[user]

    def api(self, method: str, path: str, *, user: str | None = "admin", json_body: Any = None,
            headers: dict[str, str] | None = None, expect: int | None = 200) -> Any:
        """Call the API (``path`` from the root, e.g. ``/api/v2/dags``) as ``user`` (``None``: anonymous).
        Returns the JSON body; with ``expect=None`` returns the ``httpx.Response``."""
        import httpx

        hdrs = dict(headers or {})
        if user is not None:
            hdrs["Authorization"] = f"Bearer {self.token(user)}"
        resp = httpx.request(method, f"{self.base_url}{path}", json=json_body, headers=hdrs, timeout=60)
        if expect is None:
            return resp
        assert resp.status_code == expect, f"{method} {path}: {resp.status_code} {resp.text[:500]}"
        return resp.json() if resp.content else None

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the dag-processor has parsed ``dag_id``; make sure it is not paused."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            resp = self.api("GET", f"/api/v2/dags/{dag_id}", expect=None)
            if resp.status_code == 200:
                if resp.json().get("is_paused"):
                    self.api("PATCH", f"/api/v2/dags/{dag_id}", json_body={"is_paused": False})
                return resp.json()
            time.sleep(2)
        raise TimeoutError(f"DAG {dag_id} not parsed after {timeout:.0f}s; dag-processor log:\n"
                           f"{self.log_tail('dag-processor')}")

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None, user: str = "admin") -> str:
        """Create a DAG run through the REST API; returns its run id."""
        body = self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", user=user,
                        json_body={"logical_date": None, "conf": conf or {}})
        return body["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 300.0) -> str:
        """Wait until the run is success or failed; returns that state."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        raise TimeoutError(f"run {dag_id}/{run_id} not finished after {timeout:.0f}s; scheduler log:\n"
                           f"{self.log_tail('scheduler')}")

    def wait_for_task(self, dag_id: str, run_id: str, task_id: str, states: tuple[str, ...] = ("success",),
                      timeout: float = 300.0) -> dict[str, Any]:
        """Wait until a task instance is in one of ``states`` (fails early if it failed instead)."""
        deadline = time.monotonic() + timeout
        ti: dict[str, Any] = {}
        while time.monotonic() < deadline:
            self.check_alive()
            ti = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
            if ti.get("state") in states:
                return ti
            if ti.get("state") in ("failed", "upstream_failed") and ti.get("state") not in states:
                raise AssertionError(f"task {dag_id}.{task_id} {ti.get('state')}; scheduler log:\n{self.log_tail('scheduler')}")
            time.sleep(2)
        raise TimeoutError(f"task {dag_id}.{task_id} not in {states} after {timeout:.0f}s (last: {ti.get('state')})")


@contextlib.contextmanager
def running_stack(root: Path, options: StackOptions | None = None) -> Iterator[AirflowStack]:
    """Start a stack under ``root`` and stop it (by pid) whatever happens; skips when it cannot run here."""
    reason = missing_requirements()
    if reason:
        pytest.skip(f"real Airflow stack: {reason}")
    stack = AirflowStack(root, options).start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def airflow_stack_options() -> StackOptions:
    """Override in a test module to choose the DAGs folder, environment and users."""
    return StackOptions()


@pytest.fixture(scope="module")
def airflow_stack(tmp_path_factory: pytest.TempPathFactory, airflow_stack_options: StackOptions) -> Iterator[AirflowStack]:
    """A running :class:`AirflowStack` for the test module (stopped at the end of the module)."""
    with running_stack(tmp_path_factory.mktemp("airflow-stack"), airflow_stack_options) as stack:
        yield stack

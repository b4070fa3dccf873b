"""The driver runtime as one deterministic zip, shipped with a YARN or Kubernetes application.

In cluster mode the driver runs on a machine that has neither this provider nor its checkout. The
runtime (``spark_jobs/``: the launcher, the reporter, the bundled jobs) imports a few modules of
``airflow_streaming`` (the control contract and storages, redaction, faults...). This module packs
exactly those - found by following the ``airflow_streaming`` imports of every ``spark_jobs`` module,
including imports inside functions - into a zip that spark-submit ships with ``--py-files``.

Deterministic: the same sources give the same bytes (sorted entries, fixed timestamps and modes, no
``__pycache__``), so the zip's name carries its content hash and an unchanged runtime is never
uploaded under a new name.
"""

from __future__ import annotations

import dis
import hashlib
import io
import os
import tempfile
import zipfile
from pathlib import Path

from airflow_streaming.private_dir import private_dir

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The checkout (or site-packages directory) holding ``airflow_streaming`` and ``spark_jobs``."""

#: Besides ``spark_jobs``: the compatibility check's command line, which the gate's child runs in a stream
#: version's own Spark runtime (``airflow_streaming.compat.run``), from the runtime tree.
EXTRA_ROOTS = ("airflow_streaming/compat/__main__.py",)
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS = {"__pycache__"}


def _module_file(root: Path, module: str) -> Path | None:
    """The source file of ``module`` under ``root`` (a module or a package's ``__init__``)."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path) -> set[str]:
    """Every module name ``path`` imports (absolute imports, at any depth of the file).

    Read from the compiled bytecode (``IMPORT_NAME`` and the level and names loaded just before it),
    not from ``ast.parse``: on CPython 3.11 before 3.11.8, building an AST races with the garbage
    collector and fails now and then with "AST constructor recursion depth mismatch" (gh-106905).
    """
    names: set[str] = set()
    codes = [compile(path.read_bytes(), str(path), "exec", dont_inherit=True)]
    while codes:
        code = codes.pop()
        loaded: list[object] = []  # the constants loaded by the instructions just before this one
        for instruction in dis.get_instructions(code):
            if instruction.opname == "IMPORT_NAME":
                level, fromlist = (loaded[-2], loaded[-1]) if len(loaded) >= 2 else (0, None)
                if level == 0:
                    names.add(instruction.argval)
                    if isinstance(fromlist, tuple):
                        names.update(f"{instruction.argval}.{name}" for name in fromlist if name != "*")
            if instruction.opname in ("LOAD_CONST", "LOAD_SMALL_INT"):
                loaded.append(instruction.argval)
            elif instruction.opname != "EXTENDED_ARG":  # a prefix of the next instruction's argument
                loaded.clear()
        codes.extend(const for const in code.co_consts if hasattr(const, "co_code"))
    return names


def runtime_files(root: Path = PROJECT_ROOT) -> list[Path]:
    """All of ``spark_jobs`` plus the ``airflow_streaming`` modules it needs (and their packages'
    ``__init__`` files), sorted; raises ``FileNotFoundError`` when ``spark_jobs`` is missing."""
    jobs = root / "spark_jobs"
    if not jobs.is_dir():
        raise FileNotFoundError(f"{jobs} does not exist: the driver runtime cannot be packed")
    files: set[Path] = set()
    for directory, dirs, names in os.walk(jobs):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        files.update(Path(directory) / n for n in names if n.endswith(".py"))
    files.update(root / extra for extra in EXTRA_ROOTS if (root / extra).is_file())
    pending = sorted(files)
    seen_modules: set[str] = set()
    while pending:
        for name in sorted(_imports(pending.pop())):
            if not name.startswith("airflow_streaming") or name in seen_modules:
                continue
            seen_modules.add(name)
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):  # the packages on the way, then the module itself
                found = _module_file(root, ".".join(parts[:depth]))
                if found is not None and found not in files:
                    files.add(found)
                    pending.append(found)
    return sorted(files)


def build_bundle(root: Path = PROJECT_ROOT) -> bytes:
    """The zip's bytes (see the module docstring)."""
    entries = {path.relative_to(root).as_posix(): path.read_bytes() for path in runtime_files(root)}
    # zipimport does not do namespace packages: a package directory without __init__.py (control/)
    # gets an empty one in the zip.
    for name in list(entries):
        parts = name.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            entries.setdefault("/".join([*parts[:depth], "__init__.py"]), b"")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, entries[name])
    return buffer.getvalue()


def bundle_path(root: Path = PROJECT_ROOT, directory: str | None = None) -> str:
    """Write the zip (once per content) and return its path:
    ``<tmp>/airflow-streaming-runtime-<uid>/airflow-streaming-runtime-<sha256[:16]>.zip``.

    The default directory is this user's private one (created 0700 and verified before use:
    :func:`airflow_streaming.private_dir.private_dir`): spark-submit reads the zip after this check, so
    nobody else may be able to put their own code there under the expected name."""
    data = build_bundle(root)
    digest = hashlib.sha256(data).hexdigest()[:16]
    if directory:
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
    else:
        folder = Path(private_dir("airflow-streaming-runtime"))
    target = folder / f"airflow-streaming-runtime-{digest}.zip"
    if not target.is_file() or target.read_bytes() != data:
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".zip.tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    return str(target)


def runtime_tree(root: Path = PROJECT_ROOT, directory: str | None = None) -> str:
    """The runtime unpacked in a directory of its own (once per content), and its path:
    ``<private dir>/tree-<sha256[:16]>``, holding ``spark_jobs/`` and the pure modules it needs - and nothing
    else of this installation.

    A driver (or the gate's child) that runs on another Spark runtime than this provider's
    (``airflow_streaming.spark_runtime``) starts ``<tree>/spark_jobs/launch.py``: the launcher puts its
    grandparent directory first on ``sys.path``, and that must not be this provider's site-packages, whose
    own ``pyspark`` would shadow the runtime's."""
    data = build_bundle(root)
    digest = hashlib.sha256(data).hexdigest()[:16]
    folder = Path(directory) if directory else Path(private_dir("airflow-streaming-runtime"))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"tree-{digest}"
    if (target / "spark_jobs" / "launch.py").is_file():
        return str(target)
    staging = Path(tempfile.mkdtemp(dir=folder, prefix=f".tree-{digest}."))
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(staging)
    os.chmod(staging, 0o755)
    try:
        os.rename(staging, target)  # complete or absent; a concurrent unpacker's copy wins
    except OSError:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return str(target)

"""The house's floors: its rooms import each other without a cycle, so that every import runs down a floor.

A room is a folder of ``airflow_streaming/`` (``lifecycle/``, ``hooks/``, ...), one of its top-level modules
(``spec.py``), or ``spark_jobs/``, ``dags/``, ``bench/``. Two rooms that import each other - at any depth,
through any file - have no floor order: a "pure" folder holding one I/O file, a hook reaching up into the
lifecycle, the driver runtime and the gate reaching into each other. ``docs/architecture.md`` draws the floors
this test holds (pure core, I/O, the acting layer, Airflow glue, the driver runtime).
"""

from __future__ import annotations

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOPS = ("airflow_streaming", "spark_jobs", "dags", "bench")


def _module(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).parts
    if parts[0] != "airflow_streaming":
        return parts[0] + "/"
    return "/".join(parts[:2]) if len(parts) == 2 else "/".join(parts[:2]) + "/"


def room_imports() -> dict[str, dict[str, list[str]]]:
    """room -> room it imports -> the ``file:line`` of each such import."""
    files = [p for top in TOPS for p in sorted((ROOT / top).rglob("*.py"))]
    modules = {_module(p): p for p in files}
    edges: dict[str, dict[str, list[str]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in files:
        package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                names = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and modules[name] != path and _room(modules[name]) != _room(path):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    edges[_room(path)][_room(modules[name])].append(where)
    return edges


def _cycles(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one room (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(room: str) -> None:
        index[room] = low[room] = len(index)
        stack.append(room)
        on_stack.add(room)
        for other in edges.get(room, {}):
            if other not in index:
                visit(other)
                low[room] = min(low[room], low[other])
            elif other in on_stack:
                low[room] = min(low[room], index[other])
        if low[room] == index[room]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == room:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for room in sorted(set(edges) | {o for targets in edges.values() for o in targets}):
        if room not in index:
            visit(room)
    return found


def test_the_rooms_import_each_other_without_a_cycle():
    edges = room_imports()
    assert "airflow_streaming/lifecycle/" in edges and "airflow_streaming/hooks/" in edges["airflow_streaming/lifecycle/"]
    cycles = _cycles(edges)
    detail = [f"{a} -> {b}: {', '.join(edges[a][b][:3])}" for cycle in cycles for a in cycle for b in cycle
              if b in edges.get(a, {})]
    assert cycles == [], f"rooms that import each other (an arrow runs back up): {cycles}\n" + "\n".join(detail)


def test_the_pure_core_imports_nothing_that_acts():
    """The reconcile core, the supervision policy and the health rules stand on the ground floor."""
    edges = room_imports()
    for room in ("airflow_streaming/reconcile/", "airflow_streaming/supervision/", "airflow_streaming/health/"):
        upward = {other for other in edges.get(room, {}) if other not in (
            "airflow_streaming/models.py", "airflow_streaming/exceptions.py")}
        assert upward == set(), f"{room} imports {upward}"


def test_a_planted_arrow_back_up_is_a_cycle():
    edges = room_imports()
    planted = {room: dict(targets) for room, targets in edges.items()}
    planted.setdefault("airflow_streaming/reconcile/", {})["airflow_streaming/lifecycle/"] = ["planted:1"]
    assert any("airflow_streaming/reconcile/" in cycle for cycle in _cycles(planted))

"""The long tier names what covers it: every ``pytest.mark.long(covered_by=...)`` in the tests names a test of
the suite (``tests/...py::test_name``, defined there and not itself long) or a bench smoke
(``bench/<x>.py --smoke``, a bench that test_bench_smoke runs) - so a kind never leaves the suite by being
marked long, and a rename of the covering test fails here instead of silently emptying the kind.

``scripts/test.sh`` (the README's test command) leaves the long tier out of both of its sessions;
``scripts/long-trials.sh`` runs it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _is_long_mark(node: ast.AST) -> bool:
    """``pytest.mark.long`` (the callee of ``pytest.mark.long(...)``)."""
    return (isinstance(node, ast.Attribute) and node.attr == "long" and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark" and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest")


def long_marks(path: Path) -> list[tuple[int, str | None]]:
    """(line, covered_by) of every ``pytest.mark.long`` in a file (None: no literal covered_by, or no call)."""
    tree = ast.parse(path.read_text(), str(path))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_long_mark(n.func)]
    called = {id(c.func) for c in calls}
    found = []
    for call in calls:
        value = next((k.value for k in call.keywords if k.arg == "covered_by"), None)
        literal = value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
        found.append((call.lineno, literal))
    found += [(n.lineno, None) for n in ast.walk(tree)
              if isinstance(n, ast.Attribute) and _is_long_mark(n) and id(n) not in called]
    return sorted(found)


def long_functions(path: Path) -> set[str]:
    """Test functions of a file decorated with ``pytest.mark.long(...)``."""
    names = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and _is_long_mark(d.func) for d in node.decorator_list):
            names.add(node.name)
    return names


def check_covered_by(covered_by: str | None) -> str | None:
    """What is wrong with a covered_by value, or None."""
    if not covered_by:
        return "no covered_by: name the test (tests/<file>.py::<test>) or bench smoke that runs this kind in the suite"
    if covered_by.startswith("bench/"):
        script, _, mode = covered_by.partition(" ")
        if mode != "--smoke":
            return f"{covered_by!r}: a bench covers a kind through its smoke: 'bench/<x>.py --smoke'"
        if not (ROOT / script).is_file():
            return f"{covered_by!r}: {script} does not exist"
        smoke_test = (TESTS / "integration" / "test_bench_smoke.py").read_text()
        if f'"{Path(script).name}": Smoke(' not in smoke_test:
            return f"{covered_by!r}: {script} has no smoke in tests/integration/test_bench_smoke.py"
        return None
    file, sep, name = covered_by.partition("::")
    if not sep or not file.startswith("tests/") or "[" in name:
        return f"{covered_by!r}: expected tests/<file>.py::<test function> or bench/<x>.py --smoke"
    path = ROOT / file
    if not path.is_file():
        return f"{covered_by!r}: {file} does not exist"
    defined = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
    if name not in defined:
        return f"{covered_by!r}: {file} defines no {name}"
    if name in long_functions(path):
        return f"{covered_by!r}: that test is itself in the long tier"
    return None


def test_every_long_mark_names_a_suite_test_or_bench_smoke_that_exists():
    files = sorted(TESTS.rglob("test_*.py"))
    marks = [(f, line, covered) for f in files for line, covered in long_marks(f)]
    assert len(marks) >= 7, marks  # the tier as of this writing; fewer means this scan stopped finding them
    problems = [f"{f.relative_to(ROOT)}:{line}: {why}" for f, line, covered in marks
                if (why := check_covered_by(covered))]
    assert problems == [], "\n".join(problems)


def test_the_check_refuses_what_would_let_a_kind_leave_the_suite(tmp_path):
    here = "tests/unit/test_long_tier.py"
    assert check_covered_by(None).startswith("no covered_by")
    assert "does not exist" in check_covered_by("tests/integration/test_gone.py::test_x")
    assert "defines no test_renamed" in check_covered_by(f"{here}::test_renamed")
    assert "expected" in check_covered_by("test_soak.py")
    assert "through its smoke" in check_covered_by("bench/cross_host_bench.py")
    assert "has no smoke" in check_covered_by("bench/harness.py --smoke")
    long_test = ("tests/integration/test_hdfs_stateful_snapshot.py::"
                 "test_stateful_hdfs_checkpoint_snapshot_rollback_and_restart")
    assert "itself in the long tier" in check_covered_by(long_test)
    assert check_covered_by(f"{here}::test_every_long_mark_names_a_suite_test_or_bench_smoke_that_exists") is None
    # A bare mark, and one whose covered_by is not a literal, are found and refused.
    sample = tmp_path / "test_sample.py"
    sample.write_text("import pytest\n\n@pytest.mark.long\ndef test_a():\n    pass\n\n"
                      "@pytest.mark.long(covered_by=NAME)\ndef test_b():\n    pass\n")
    assert long_marks(sample) == [(3, None), (7, None)]


def test_the_readme_test_command_leaves_the_long_tier_out_and_its_script_runs_it():
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    sessions = [line for line in test_sh.splitlines() if "-m pytest -m" in line]
    assert len(sessions) == 3 and all("not long" in line for line in sessions), sessions
    assert "-m long" in (ROOT / "scripts" / "long-trials.sh").read_text()

"""Every ```python snippet of README.md and docs/**/*.md runs (issue 34: "docs whose every snippet runs").

A page's snippets are read in order, like a session: each page runs in one fresh namespace, so a
snippet may use what an earlier snippet of the same page defined (the README's ``SPEC``), and nothing
else. A page may start from another page's namespace with ``<!-- snippets: after <path> -->`` (the
how-to pages start from ``docs/howto/README.md``'s ``SPEC``, as that page says).

Each snippet is compiled, every name it imports is imported (``import x`` / ``from x import y`` must
resolve against the installed product and its dependencies), and it is executed - in a child process
whose ``AIRFLOW_HOME`` is a temp dir - so that a name used but never defined or imported fails. A
snippet that is deliberately partial is marked with ``<!-- snippet: fragment - <reason> -->`` on the
line(s) just before its fence: it is not executed, but it must still compile (as written, or as the
body of a function) or at least import every name it imports, and the marker must give its reason.
:data:`FRAGMENT_REASONS` lists every marker found, so a new one shows in a failing diff.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!--\s*snippet:\s*(\w+)\s*(?:-\s*(.*?))?\s*-->\s*$", re.S)
AFTER = re.compile(r"<!--\s*snippets:\s*after\s+(\S+)\s*-->")

#: Every fragment marker of the docs, page -> the markers' reasons in order; a marker added or removed must
#: be added here or removed from here (a snippet that is not run is a decision, not an accident).
FRAGMENT_REASONS: dict[str, list[str]] = {
    "docs/own-job.md": ["a job's own code: it needs the Spark session the driver runs it in"],
    "docs/notifications.md": ["sends a real notification (needs a Slack connection and an SMTP server)"],
    "docs/spark-runtimes.md": ["one line of a job's query: needs the job's `events` DataFrame"],
}


@dataclass(frozen=True)
class Snippet:
    """One ```python block: its page, the line of its first code line, its code, its marker."""

    page: str
    line: int
    code: str
    kind: str = ""  # "" (run it) or "fragment"
    reason: str = ""


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def snippets_of(page: Path) -> list[Snippet]:
    """The page's ```python blocks, in order, each with the marker written just before its fence."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n")
        last = before.rsplit("\n", 1)[-1]
        marker = MARKER.search(last) if last.lstrip().startswith("<!--") else None
        if marker is None and before.endswith("-->") and "<!--" in before:  # a marker over several lines
            marker = MARKER.search(before[before.rindex("<!--"):])
        line = text.count("\n", 0, match.start(1)) + 1
        found.append(Snippet(str(page.relative_to(REPO)), line, match.group(1),
                             marker.group(1) if marker else "", (marker.group(2) or "").strip() if marker else ""))
    return found


def prelude_of(page: Path) -> str | None:
    """The page whose namespace this page starts from (``<!-- snippets: after <path> -->``), if any."""
    match = AFTER.search(page.read_text(encoding="utf-8"))
    return match.group(1) if match else None


def all_snippets() -> dict[str, list[Snippet]]:
    return {str(p.relative_to(REPO)): s for p in pages() if (s := snippets_of(p))}


# ------------------------------------------------------------------------------------ the child process


def _imports(code: str) -> list[tuple[str, str | None]]:
    """``(module, name)`` for every import of the code (``name`` None for ``import module``); by the
    parser when the code compiles, else by line (a fragment)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        tree = None
    found: list[tuple[str, str | None]] = []
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found += [(node.module, alias.name) for alias in node.names]
        return found
    for line in code.splitlines():
        if m := re.match(r"\s*from\s+([\w.]+)\s+import\s+\(?([\w\s,]+)", line):
            found += [(m.group(1), n.strip()) for n in m.group(2).split(",") if n.strip()]
        elif m := re.match(r"\s*import\s+([\w.\s,]+)", line):
            found += [(n.strip().split(" as ")[0], None) for n in m.group(1).split(",") if n.strip()]
    return found


def _resolve(module: str, name: str | None) -> str | None:
    """None when the import works, else the error."""
    import importlib

    try:
        mod = importlib.import_module(module)
        if name is not None and name != "*" and not hasattr(mod, name):
            importlib.import_module(f"{module}.{name}")
    except Exception as exc:  # noqa: BLE001 - reported with the snippet
        target = f"from {module} import {name}" if name else f"import {module}"
        return f"{target}: {type(exc).__name__}: {exc}"
    return None


def _compiles(code: str) -> str | None:
    try:
        compile(code, "<snippet>", "exec")
        return None
    except SyntaxError as first:
        try:
            compile("def _fragment():\n" + textwrap.indent(code, "    "), "<snippet>", "exec")
            return None
        except SyntaxError:
            return f"SyntaxError: {first.msg} (line {first.lineno})"


def run_pages(snippets: dict[str, list[dict]], preludes: dict[str, str | None]) -> list[str]:
    """Run every page's snippets (in this process: the child); return one line per failure."""
    failures: list[str] = []
    namespaces: dict[str, dict] = {}

    def run(page: str) -> dict:
        if page in namespaces:
            return namespaces[page]
        after = preludes.get(page)
        namespace = dict(run(after)) if after else {"__name__": "__snippet__"}
        namespaces[page] = namespace
        for s in snippets.get(page, []):
            where = f"{page}:{s['line']}"
            for module, name in _imports(s["code"]):
                if (error := _resolve(module, name)) is not None:
                    failures.append(f"{where}: {error}")
            if s["kind"] == "fragment":
                if (error := _compiles(s["code"])) is not None and not _imports(s["code"]):
                    failures.append(f"{where}: a fragment that neither compiles nor imports anything: {error}")
                continue
            try:
                exec(compile(s["code"], where, "exec"), namespace)  # noqa: S102 - the docs' own code
            except Exception as exc:  # noqa: BLE001 - reported with the snippet
                failures.append(f"{where}: {type(exc).__name__}: {exc}")
        return namespace

    for page in snippets:
        if (after := preludes.get(page)) is not None and after not in snippets:
            failures.append(f"{page}: 'snippets: after {after}' names a page without snippets")
            continue
        run(page)
    return failures


# ----------------------------------------------------------------------------------------------- tests


def test_markers_are_known_and_give_a_reason():
    found: dict[str, list[str]] = {}
    for page in all_snippets().values():
        for s in page:
            if s.kind:
                found.setdefault(s.page, []).append(s.reason)
    kinds = {s.kind for page in all_snippets().values() for s in page if s.kind}
    assert kinds <= {"fragment"}, f"unknown snippet marker(s): {kinds - {'fragment'}}"
    assert all(all(v) for v in found.values()), f"a fragment marker without a reason: {found}"
    assert found == FRAGMENT_REASONS


def test_the_snippet_reader_sees_markers_order_and_preludes(tmp_path, monkeypatch):
    """The reader itself: a marker binds to the fence right after it only; a page's prelude is read."""
    page = tmp_path / "page.md"
    page.write_text("<!-- snippets: after docs/howto/README.md -->\n\n```python\nA = 1\n```\n\ntext\n"
                    "<!-- snippet: fragment - partial on purpose -->\n```python\nf(x, ...)\n```\n"
                    "```python\nB = A\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    got = snippets_of(page)
    assert [(s.line, s.code, s.kind, s.reason) for s in got] == [
        (4, "A = 1\n", "", ""), (10, "f(x, ...)\n", "fragment", "partial on purpose"), (13, "B = A\n", "", "")]
    assert prelude_of(page) == "docs/howto/README.md"


def test_a_broken_snippet_fails(tmp_path):
    """The runner is not a rubber stamp: an undefined name, a missing import and a bad fragment fail."""
    snippets = {
        "a.md": [{"line": 1, "code": "gate = 1\ngate >> deploy_v2\n", "kind": ""},
                 {"line": 5, "code": "from airflow_streaming.spec import NoSuchName\n", "kind": ""},
                 {"line": 9, "code": "import no_such_module_here\nx(1, ...)\n", "kind": "fragment"},
                 {"line": 12, "code": "f(a=1, ...)\n", "kind": "fragment"}],
        "b.md": [{"line": 1, "code": "SPEC = {}\n", "kind": ""}],
        "c.md": [{"line": 1, "code": "assert SPEC == {}\n", "kind": ""}],
    }
    failures = run_pages(snippets, {"c.md": "b.md"})
    assert [f.split(": ")[0] for f in failures] == ["a.md:1", "a.md:5", "a.md:5", "a.md:9", "a.md:12"]
    assert "deploy_v2" in failures[0] and "no_such_module_here" in failures[3]


def test_every_snippet_of_the_readme_and_docs_runs(tmp_path):
    snippets = {page: [asdict(s) for s in found] for page, found in all_snippets().items()}
    preludes = {page: prelude_of(REPO / page) for page in snippets}
    assert "README.md" in snippets and len(snippets) > 10
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow-home"), "PYTHONPATH": str(REPO),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    work = tmp_path / "snippets.json"
    work.write_text(json.dumps({"snippets": snippets, "preludes": preludes}))
    child = subprocess.run([sys.executable, __file__, str(work)], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stdout + child.stderr
    failures = json.loads(child.stdout.strip().splitlines()[-1])
    assert failures == [], "\n".join(failures)


if __name__ == "__main__":  # the child: run the pages given in the JSON file, print the failures as JSON
    given = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps(run_pages(given["snippets"], given["preludes"])))

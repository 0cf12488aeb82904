"""The layout's promises (docs/architecture.md), read from the code itself.

Each concept has one home and the imports point down: config ← routing ←
scheduler ← spark, tasks. These tests parse every product module (imports inside
functions included) so a new cycle, an upward import, SQL outside the store or
a module grown past 300 lines fails here, by name, before review.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "routing", "scheduler", "spark", "tasks")
#: Lower layers never import higher ones: the seed job (spark) writes through the store
#: and the publisher and never imports tasks; the CLI in tasks starts the seed job.
LAYER = {"config": 0, "routing": 1, "scheduler": 2, "spark": 3, "tasks": 4}
#: The upward imports the layout allows: the console entry point loads the CLI (and
#: ``recur status``'s command alone, which lives in scheduler/status/).
ALLOWED_UPWARD = {("config.entry", "tasks.cli"), ("config.entry", "scheduler.status.command")}
MAX_LINES = 300

SQL = re.compile(
    r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|WITH\s+\w+\s+AS\s"
    r"|CREATE\s+(UNIQUE\s+)?(TABLE|INDEX|TEMP)|ALTER\s+TABLE\s|DROP\s+(TABLE|INDEX)\s"
    r"|PRAGMA\s|COPY\s+\w+\s*(\(|FROM\s|TO\s)|BEGIN\s+IMMEDIATE|LOCK\s+TABLE\s)",
)


def _product_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                  if "migrations" not in p.parts)


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in _product_files()}


def _resolve(name: str) -> str | None:
    """The product module an import names (the longest known prefix), or None."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str) -> set[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                found.add(target)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def test_no_product_module_is_over_300_lines() -> None:
    long = {m: n for m, p in MODULES.items()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_imports_point_down_but_for_the_console_entry_point() -> None:
    upward = {(m, t) for m, targets in GRAPH.items() for t in targets
              if LAYER[t.split(".")[0]] > LAYER[m.split(".")[0]]}
    assert upward <= ALLOWED_UPWARD


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    return seen


def test_no_import_cycle() -> None:
    # The allowed upward edge is left out: the console entry point stands outside the
    # layers it starts.
    graph = {m: {t for t in ts if (m, t) not in ALLOWED_UPWARD} for m, ts in GRAPH.items()}
    in_a_cycle = {m: sorted(t for t in _reachable(graph, m) if m in _reachable(graph, t))
                  for m in graph if m in _reachable(graph, m)}
    assert in_a_cycle == {}


def _strings(tree: ast.AST) -> list[ast.Constant]:
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docstrings]


def test_sql_text_lives_only_in_the_store_package() -> None:
    outside = [f"{m}:{s.lineno}" for m, p in MODULES.items()
               if m != "scheduler.store" and not m.startswith("scheduler.store.")
               for s in _strings(ast.parse(p.read_text())) if SQL.match(str(s.value))]
    assert outside == []


@pytest.mark.parametrize("text", ["SELECT 1", "INSERT INTO due_jobs (a) VALUES (1)",
                                  "UPDATE due_jobs SET x = 1", "PRAGMA journal_mode=WAL",
                                  "COPY due_jobs (a) FROM STDIN", "BEGIN IMMEDIATE"])
def test_the_sql_probe_sees_statements(text: str) -> None:
    assert SQL.match(text)


@pytest.mark.parametrize("text", ["COPY text lines of due-jobs rows", "select a bucket",
                                  "Update the row"])
def test_the_sql_probe_passes_prose(text: str) -> None:
    assert not SQL.match(text)

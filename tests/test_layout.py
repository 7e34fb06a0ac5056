"""The house's shape: the analysis has a room of its own, and nothing imports in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Where each importable package lives in the checkout (codemods/ installs as dp2ddp.codemods).
PACKAGES = {"dp2ddp": ROOT / "dp2ddp", "dp2ddp.codemods": ROOT / "codemods"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            if package == "dp2ddp" and path.is_relative_to(ROOT / "dp2ddp" / "verify"):
                continue  # verify knows nothing of the analysis and is checked apart.
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            found[name] = path
    return found


def _runtime_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports when it runs: type-checking-only imports do not count."""
    tree = ast.parse(path.read_text())
    is_package = path.name == "__init__.py"
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [stem] + [f"{stem}.{alias.name}" for alias in node.names]
        for target in targets:
            if target in modules and target != name:
                found.add(target)
    return found


GRAPH = {name: _runtime_imports(name, path, _modules()) for name, path in _modules().items()}


def test_the_analysis_imports_nothing_from_codemods_check_or_the_cli() -> None:
    analysis = [name for name in GRAPH if name.startswith("dp2ddp.analysis")]
    assert len(analysis) >= 8
    for name in analysis:
        outside = {target for target in GRAPH[name] if not target.startswith(("dp2ddp.analysis", "dp2ddp.rules"))}
        assert not outside, f"{name} imports {sorted(outside)}"


def test_checks_rules_live_beside_check_not_among_the_codemods() -> None:
    assert "dp2ddp.hazards" in GRAPH["dp2ddp.check"]
    assert not any(target.startswith("dp2ddp.codemods") for target in GRAPH["dp2ddp.hazards"])


@pytest.mark.parametrize("package", ["dp2ddp.analysis", "dp2ddp.codemods"])
def test_no_module_imports_itself_in_a_circle(package: str) -> None:
    inside = {name: {t for t in targets if t.startswith(package)} for name, targets in GRAPH.items() if name.startswith(package)}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = path[path.index(name) :] + [name]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        for target in sorted(inside.get(name, ())):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(inside):
        visit(name, [])

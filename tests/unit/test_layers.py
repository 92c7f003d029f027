"""The layering rule of the brief and DESIGN.md: `gateway/` and `worker/` never import each
other, and `shared/` imports neither. Read from the source (the AST), so a lazy import inside a
function counts as much as one at the top.

`gateway -> worker` is not listed yet: gateway/search/embedding.py loads the worker's embedder
on purpose (ADR 0108), which is outside this test's change; it joins the list once that moves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"shared": ("gateway", "worker"), "worker": ("gateway",)}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_a_room_imports_none_of_the_rooms_it_must_not(room):
    offenders = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / room).rglob("*.py")
        for name in imported(path)
        if name.split(".")[0] in FORBIDDEN[room])
    assert offenders == []

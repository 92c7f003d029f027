"""The rooms' walls (DESIGN.md, BRIEF): gateway/ and worker/ never import each other, and shared/
imports neither. Read from the source, so an import inside a function counts too (the query
model's loader imported the worker's embed module that way until ADR 0230)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"gateway": {"worker"}, "worker": {"gateway"}, "shared": {"gateway", "worker"}}
# Known crossings owned by other work, listed exactly so that no new one slips in beside them;
# remove an entry when its crossing is fixed (the test then fails until it is).
KNOWN: set[str] = set()


def imported_packages(path: Path) -> set[tuple[str, int]]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {(alias.name.split(".")[0], node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add((node.module.split(".")[0], node.lineno))
    return found


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_a_room_imports_no_room_it_must_not(room):
    crossings = {f"{path.relative_to(ROOT)} imports {package}": line
                 for path in sorted((ROOT / room).rglob("*.py"))
                 for package, line in imported_packages(path) if package in FORBIDDEN[room]}
    known = {k for k in KNOWN if k.startswith(f"{room}/")}

    unexpected = [f"{c} (line {line})" for c, line in sorted(crossings.items()) if c not in known]
    assert not unexpected, "\n".join(unexpected)
    assert known <= set(crossings), f"fixed meanwhile; remove from KNOWN: {known - set(crossings)}"

"""docs/architecture.md draws the layers; this keeps the drawing true to the import graph."""

from __future__ import annotations

import re
from pathlib import Path

import grimp

DOC = Path(__file__).parent.parent / "docs" / "architecture.md"
ROOMS = {  # module prefix -> the node that stands for it in the drawing
    "tether.runtime.testing": "testing",
    "tether.runtime.ops": "ops",
    "tether.runtime._executions": "executions",
    "tether.runtime._core": "core",
    "tether.actors": "actors",
    "tether.stores": "stores",
}


PUBLIC = {"tether.runtime", "tether.runtime.telemetry"}
"""The public modules of tether.runtime, drawn as one node."""


def room(module: str) -> str:
    for prefix, name in ROOMS.items():
        if module == prefix or module.startswith(prefix + "."):
            return name
    assert module in PUBLIC, module
    return "runtime"  # the public surface of tether.runtime, above its rooms


def drawn() -> set[tuple[str, str]]:
    [diagram] = re.findall(r"```mermaid\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    return {(a, b) for a, b in re.findall(r"^\s*(\w+) --> (\w+)\s*$", diagram, flags=re.MULTILINE)}


def imported() -> set[tuple[str, str]]:
    graph = grimp.build_graph("tether.actors", "tether.runtime", "tether.stores")
    edges = set()
    for importer in graph.modules:
        for target in graph.find_modules_directly_imported_by(importer):
            a, b = room(importer), room(target)
            if a != b:
                edges.add((a, b))
    return edges


def test_the_drawing_has_every_import_between_rooms_and_no_other() -> None:
    assert imported() == drawn()

"""The migration guides' code blocks run, in order, as a reader would type them.

Each page's Python blocks share one namespace; a block with a top-level ``await``
runs on the event loop under test (asyncio or trio), the others as plain code
with no loop running (the blocking calls of tether.actors.compat need that).
``bash`` blocks run in a shell, with the installed ``tether`` command first on
the PATH, in the asyncio run only: a command is a process of its own, reading
what the blocks before it wrote to the store, the same rows whichever loop
wrote them, so the trio run (which runs every Python block) does not start it
again. A block of any other language fails the test: every block runs.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tests._postgres import test_database as fresh_database

if TYPE_CHECKING:
    from collections.abc import Iterator

DOCS = Path(__file__).parent.parent / "docs"
GUIDES = ["migrating-from-fastaiagent.md", "migrating-from-langgraph.md"]
SHELL_BACKEND = "asyncio"  # the run whose bash blocks run
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def blocks(page: Path) -> Iterator[tuple[str, str, int]]:
    """Each fenced block: its language, its code, and the line its code starts on."""
    text = page.read_text()
    for found in FENCE.finditer(text):
        yield found.group(1), found.group(2), text.count("\n", 0, found.start(2)) + 1


@pytest.fixture
def database_url() -> Iterator[str]:
    with fresh_database() as dsn:
        yield dsn


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("guide", GUIDES)
def test_every_block_of_the_guide_runs(guide: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    page = DOCS / guide
    monkeypatch.chdir(tmp_path)  # the guides' stores are files in the current directory
    monkeypatch.delenv("DATABASE_URL", raising=False)
    if "DATABASE_URL" in page.read_text():  # a database of its own, for a page that asks for one
        monkeypatch.setenv("DATABASE_URL", request.getfixturevalue("database_url"))
    monkeypatch.delenv("TETHER_STORE", raising=False)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    namespace: dict[str, Any] = {"__name__": "guide"}
    ran = 0
    for language, code, line in blocks(page):
        where = f"{page.name}:{line}"
        if language == "python":
            # Blank lines first, so that a traceback names the line of the page.
            compiled = compile("\n" * (line - 1) + code, str(page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            outcome = eval(compiled, namespace)
            if inspect.iscoroutine(outcome):
                async def drive(awaited: Any = outcome) -> None:
                    await awaited

                anyio.run(drive, backend=backend)
        elif language == "bash":
            commands = [c for c in code.splitlines() if c.strip() and not c.lstrip().startswith("#")]
            for command in commands if backend == SHELL_BACKEND else []:
                done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True,
                                      text=True, timeout=60, check=False)
                assert done.returncode == 0, f"{where}: {command}\n{done.stdout}{done.stderr}"
        else:
            pytest.fail(f"{where}: a ```{language} block; every block of a guide must run (python or bash)")
        ran += 1
    assert ran > 0, f"{page.name}: no blocks found"

"""The ``tether`` console script.

It grows with the operator surface; for now it reports its version and runs the
store demo.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ._version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tether`` command line and return its exit code."""
    parser = argparse.ArgumentParser(prog="tether", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser("demo", help="pause, list, resume and double-resume an execution")
    demo.add_argument("--store", default="sqlite:///tether-demo.db",
                      help="store URL (default: sqlite:///tether-demo.db in this directory)")
    demo.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from ._demo import run_demo

    return run_demo(args.store, backend=args.backend)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

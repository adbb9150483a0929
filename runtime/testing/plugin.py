"""tether's pytest plugin, found through the ``pytest11`` entry point and inert until enabled.

Enable it in the project's pytest configuration::

    [tool.pytest.ini_options]
    tether_testing = true

or for one run with ``pytest --tether`` (or ``-p tether.runtime.testing.fixtures``).
Then the fixtures of `tether.runtime.testing.fixtures` are available to every test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

FIXTURES = "tether.runtime.testing.fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declare the ini switches and ``--tether``."""
    parser.addini("tether_testing", type="bool", default=False,
                  help="tether: provide the tether_store, tether_clock and tether_effects fixtures.")
    parser.addini("tether_postgres", default="if-available",
                  help="tether: 'required' fails tether_store[postgres] where no server answers "
                       "(default 'if-available': it skips, saying why).")
    parser.getgroup("tether").addoption("--tether", action="store_true", default=False,
                                        help="Enable tether's testing fixtures for this run.")


def pytest_configure(config: pytest.Config) -> None:
    """Load the fixtures when the project (or the command line) turned them on."""
    enabled = config.getini("tether_testing") or config.getoption("tether")
    if enabled and not config.pluginmanager.has_plugin(FIXTURES):
        config.pluginmanager.import_plugin(FIXTURES)

"""The installed distribution's version."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tether")
except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    __version__ = "0+unknown"

"""Names of the supervision vocabulary, kept apart so every module can import them."""

from __future__ import annotations

import enum
from typing import Literal


class SupervisionStrategy(enum.Enum):
    """What a parent does when one of its children stops abnormally (Erlang/OTP's names).

    Not to be confused with the LLM `Supervisor` of `tether.actors`, which delegates work.
    """

    ONE_FOR_ONE = "one_for_one"
    """Restart only the child that failed."""
    ONE_FOR_ALL = "one_for_all"
    """Stop every other child (in reverse start order), then restart them all in order."""
    REST_FOR_ONE = "rest_for_one"
    """Stop the children started after the failed one, then restart it and them in order."""


RestartPolicy = Literal["permanent", "transient", "temporary"]
"""When a stopped child is restarted: ``permanent`` always, ``transient`` only after a
crash, ``temporary`` never."""

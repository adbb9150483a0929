"""Execution ids in URLs: the whole rest of the path, whatever it holds.

Starlette's ``path`` convertor matches ``.*``, which stops at a newline: an id
holding one (ids may hold any character) would get a bare 404 from the router.
`EXECUTION_ID`, the routes' placeholder, matches every character.
"""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor


class _ExecutionId(Convertor[str]):
    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("execution_id", _ExecutionId())
EXECUTION_ID = "{execution_id:execution_id}"

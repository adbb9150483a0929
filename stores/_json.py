"""JSON in and out of the store: strict, and never pickle.

A checkpoint read back can never run code, because it is only ever JSON text.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._errors import SerializationError, StoreCorrupted

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._models import NewEntry

# ensure_ascii keeps lone surrogates and other odd code points as escapes, so the
# text is valid UTF-8 for SQLite and valid input for Postgres's json type.
_encoder = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def dumps(value: Any, *, what: str = "value") -> str:
    """Serialize a JSON-compatible value, or raise `SerializationError` naming it."""
    try:
        return _encoder.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(
            f"Cannot store {what}: it is not JSON ({exc}). Store dicts, lists, str, "
            f"int, float, bool and None only; convert models with model_dump(mode='json')."
        ) from exc


def loads(text: str) -> Any:
    """Parse JSON text that the store wrote itself."""
    try:
        return json.loads(text)
    except ValueError as exc:  # pragma: no cover - only a damaged database gets here
        raise StoreCorrupted(f"A stored JSON value cannot be parsed: {exc}") from exc


def entry_rows(entries: Sequence[NewEntry]) -> list[tuple[str, str, str, str]]:
    """Serialize journal entries before any transaction starts, so a bad payload writes nothing."""
    return [
        (e.path, e.label, e.kind, dumps(e.payload, what=f"the payload of {e.label!r}"))
        for e in entries
    ]

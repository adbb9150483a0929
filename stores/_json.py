"""JSON in and out of the store: strict, and never pickle.

A checkpoint read back can never run code, because it is only ever JSON text.
"""

from __future__ import annotations

import json
import json.encoder
from typing import TYPE_CHECKING, Any

from ._errors import SerializationError, StoreCorrupted

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from ._models import NewEntry

# ensure_ascii keeps lone surrogates and other odd code points as escapes, so the
# text is valid UTF-8 for SQLite and valid input for Postgres's json type.
_encoder = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))
# The same encoder, built once: JSONEncoder.encode builds its C encoder again on
# every call, half the cost of encoding a journal entry. Without a circularity
# check, a value that contains itself ends in RecursionError, refused below.
_make_c_encoder = getattr(json.encoder, "c_make_encoder", None)  # CPython's _json accelerator
_c_encode: Callable[[Any, int], Iterable[str]] | None = (
    _make_c_encoder(None, _encoder.default, json.encoder.encode_basestring_ascii, None, ":", ",",
                    False, False, False)
    if _make_c_encoder is not None else None
)


_NOT_JSON = (TypeError, ValueError, RecursionError)


def _encode(value: Any) -> str:
    if _c_encode is None:  # a Python without json's C accelerator
        return _encoder.encode(value)
    return "".join(_c_encode(value, 0))


def dumps(value: Any, *, what: str = "value") -> str:
    """Serialize a JSON-compatible value, or raise `SerializationError` naming it."""
    try:
        return _encode(value)
    except _NOT_JSON as exc:
        raise SerializationError(
            f"Cannot store {what}: it is not JSON ({exc}). Store dicts, lists, str, "
            f"int, float, bool and None only; convert models with model_dump(mode='json')."
        ) from exc


def loads(text: str) -> Any:
    """Parse JSON text that the store wrote itself, or raise `StoreCorrupted`: only damage gets there.

    The store wrote valid JSON, and its database validates nothing: text that does
    not parse (or a value that is no text at all) means the file changed under it.
    """
    try:
        return json.loads(text)
    except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
        raise StoreCorrupted(
            f"The database is damaged: a stored JSON value cannot be parsed ({exc}). Restore it "
            f"from a backup, or point the store at another file; `tether doctor` lists the damage."
        ) from exc


def entry_rows(entries: Sequence[NewEntry]) -> list[tuple[str, str, str, str]]:
    """Serialize journal entries before any transaction starts, so a bad payload writes nothing."""
    try:
        return [(e.path, e.label, e.kind, _encode(e.payload)) for e in entries]
    except _NOT_JSON:
        for e in entries:  # name the one that is not JSON (only now: naming costs a third of a row)
            dumps(e.payload, what=f"the payload of {e.label!r}")
        raise

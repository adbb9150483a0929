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
_NOT_JSON = (TypeError, ValueError, RecursionError)
# Every kind of value, and text that must be escaped, with the text it must become.
_PROBE = ({"a": [1, -2.5, True, None, "\u00e9\ud800"], "": {}}, '{"a":[1,-2.5,true,null,"\\u00e9\\ud800"],"":{}}')


def _c_encoder() -> Callable[[Any, int], Iterable[str]] | None:
    """`_encoder`'s C encoder, built once; None where CPython's private accelerator is missing or differs.

    The one use of CPython internals here (tests/stores/test_json_contract.py checks
    it): `JSONEncoder.encode` builds its C encoder again on every call, half the
    cost of encoding a journal entry. ``json.encoder.c_make_encoder(markers,
    default, encoder, indent, key_separator, item_separator, sort_keys, skipkeys,
    allow_nan)`` returns a callable ``(value, indent_level)`` that yields the JSON
    text in pieces, raising TypeError (not JSON) or ValueError (NaN) as
    `JSONEncoder.encode` does. With ``markers=None`` there is no circularity check:
    a value that contains itself ends in RecursionError, which `dumps` refuses too.
    Before it is used, it must encode a probe as expected.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        encode: Callable[[Any, int], Iterable[str]] = make(
            None, _encoder.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False
        )
        if "".join(encode(_PROBE[0], 0)) != _PROBE[1]:
            return None
    except Exception:  # noqa: BLE001 - another signature: the pure-Python encoder does the work
        return None
    return encode


_c_encode = _c_encoder()


def _encode(value: Any) -> str:
    if _c_encode is None:  # no C accelerator: JSONEncoder's own way (with a circularity check)
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

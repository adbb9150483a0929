"""What the stores' JSON relies on in CPython's private json accelerator (`_json._c_encoder`).

If a CPython release changes ``json.encoder.c_make_encoder``, the stores fall back
to the pure-Python encoder and keep working; these tests fail instead, by name.
"""

from __future__ import annotations

import json
import json.encoder
import math
import platform
from typing import Any

import pytest
from tether.stores import SerializationError, _json

cpython_only = pytest.mark.skipif(platform.python_implementation() != "CPython", reason="CPython's accelerator")

VALUES: list[Any] = [
    None, True, False, 0, -1, 2**70, 1.5, -0.0, 1e300, "", "plain", "é ☃ 𝄞", "\ud800 lone surrogate",
    'quote " and \\ and \n', [], {}, [1, [2, [3, {}]]], {"k": {"nested": [None, 1.25]}, "": "empty key"},
    {"1": "string keys only"},
]


@cpython_only
def test_the_accelerator_is_there_and_in_use() -> None:
    assert getattr(json.encoder, "c_make_encoder", None) is not None
    assert _json._c_encode is not None, "c_make_encoder changed: the stores encode with pure Python now"


@cpython_only
@pytest.mark.parametrize("value", VALUES)
def test_it_encodes_exactly_as_json_encoder(value: Any) -> None:
    reference = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    assert _json._c_encode is not None
    assert "".join(_json._c_encode(value, 0)) == reference.encode(value)


@cpython_only
@pytest.mark.parametrize(("value", "error"), [
    (math.nan, ValueError), (math.inf, ValueError), ({1j}, TypeError), (object(), TypeError), (b"bytes", TypeError),
])
def test_it_refuses_what_is_not_json_with_the_same_errors(value: Any, error: type[Exception]) -> None:
    assert _json._c_encode is not None
    with pytest.raises(error):
        "".join(_json._c_encode(value, 0))


@cpython_only
def test_without_a_circularity_check_a_value_that_contains_itself_recurses() -> None:
    looped: list[Any] = []
    looped.append(looped)
    assert _json._c_encode is not None
    with pytest.raises(RecursionError):
        "".join(_json._c_encode(looped, 0))


@pytest.mark.parametrize("fast", [True, False], ids=["accelerated", "fallback"])
def test_dumps_is_the_same_with_or_without_it(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not fast:
        monkeypatch.setattr(_json, "_c_encode", None)
    reference = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    for value in VALUES:
        assert _json.dumps(value) == reference.encode(value)
    looped: dict[str, Any] = {}
    looped["self"] = looped
    for bad in (math.nan, object(), looped):
        with pytest.raises(SerializationError, match="it is not JSON"):
            _json.dumps(bad, what="the value")


def test_a_changed_accelerator_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    def another_signature(*args: Any) -> Any:
        raise TypeError("c_make_encoder() takes 10 positional arguments")

    monkeypatch.setattr(json.encoder, "c_make_encoder", another_signature)
    assert _json._c_encoder() is None
    monkeypatch.setattr(json.encoder, "c_make_encoder", lambda *args: lambda value, level: ["wrong"])
    assert _json._c_encoder() is None
    monkeypatch.delattr(json.encoder, "c_make_encoder")
    assert _json._c_encoder() is None

"""Reading the SDKs' flattened query parameters.

The SDKs flatten lists as ``Name.1``, ``Name.2`` (1-based), nested models as ``Name.N.Field`` or
``Name.Field``, send booleans through ``str()`` (``True``/``False``) and some parameters as JSON strings."""

from __future__ import annotations

import builtins
import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal, overload
from urllib.parse import parse_qsl

from fleet.testing.core.errors import AliyunError, invalid, missing


def parse_query(query: str, body: bytes | str | None = None) -> dict[str, str]:
    """Merge the query string and a form-encoded body (the RPC style allows either)."""
    params = dict(parse_qsl(query, keep_blank_values=True))
    if body:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        if "=" in text and not text.lstrip().startswith(("{", "[")):
            params.update(parse_qsl(text, keep_blank_values=True))
    return params


# An integer parameter's text: ASCII digits with an optional sign, and an optional all-zero fraction ("4.0" is
# what str() makes of a float passed for an int field). Python's int() would also take "1_000" and " 4 ".
_INTEGER = re.compile(r"([+-]?[0-9]+)(?:\.0*)?", re.ASCII)
# The API's integer fields are Java Integers [INF: aliyun-api.md lists no widths]: beyond this, no count,
# size or timeout is meant, and a parser there refuses it.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def parse_int(value: str, name: str) -> int:
    """An integer parameter, or ``InvalidParameter``: a fraction ("1.5"), an exponent, NaN or a number beyond
    32 bits is not an integer the API would take."""
    match = _INTEGER.fullmatch(value)
    number = int(match.group(1)) if match and len(match.group(1)) <= 12 else None
    if number is None or not INT32_MIN <= number <= INT32_MAX:
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise invalid(f'The specified parameter "{name}" is not a valid integer: {shown!r}.')
    return number


def parse_float(value: Any, name: str) -> float:
    """A number parameter sent as text (``str()`` of a float), or ``InvalidParameter``: junk, NaN and the
    infinities are no number the API would take."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not math.isfinite(number):
        shown = str(value) if len(str(value)) <= 40 else str(value)[:37] + "..."
        raise invalid(f'The specified parameter "{name}" is not a valid number: {shown!r}.')
    return number


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def loads_json(text: str) -> Any:
    """``json.loads`` without Python's extensions ``NaN``, ``Infinity`` and ``-Infinity``: they are not JSON
    (RFC 8259) and the real API, which parses JSON, refuses them. Raises ValueError."""
    return json.loads(text, parse_constant=_not_json)


class Params:
    """Typed access to one request's parameters; errors use the real
    ``InvalidParameter``/``MissingParameter``.

    The readers are named after the types they return (``str``, ``int``, ``list``), which shadows the
    builtins in the class body: annotations there spell them ``builtins.str``. A reader given a default or
    ``required=True`` never answers None, and its overloads say so."""

    def __init__(self, raw: Mapping[builtins.str, builtins.str]) -> None:
        self.raw = dict(raw)

    def __contains__(self, name: builtins.str) -> builtins.bool:
        return name in self.raw

    @overload
    def str(
        self, name: builtins.str, default: builtins.str, *, required: builtins.bool = ...
    ) -> builtins.str: ...
    @overload
    def str(self, name: builtins.str, *, required: Literal[True]) -> builtins.str: ...
    @overload
    def str(
        self, name: builtins.str, default: None = None, *, required: builtins.bool = False
    ) -> builtins.str | None: ...
    def str(
        self, name: builtins.str, default: builtins.str | None = None, *, required: builtins.bool = False
    ) -> builtins.str | None:
        value = self.raw.get(name)
        if value is None or value == "":
            if required:
                raise missing(name)
            return default
        return value

    def req(self, name: builtins.str) -> builtins.str:
        return self.str(name, required=True)

    @overload
    def int(
        self, name: builtins.str, default: builtins.int, *, required: builtins.bool = ...
    ) -> builtins.int: ...
    @overload
    def int(self, name: builtins.str, *, required: Literal[True]) -> builtins.int: ...
    @overload
    def int(
        self, name: builtins.str, default: None = None, *, required: builtins.bool = False
    ) -> builtins.int | None: ...
    def int(
        self, name: builtins.str, default: builtins.int | None = None, *, required: builtins.bool = False
    ) -> builtins.int | None:
        value = self.str(name, required=required)
        if value is None:
            return default
        return parse_int(value, name)

    @overload
    def float(
        self, name: builtins.str, default: builtins.float, *, required: builtins.bool = ...
    ) -> builtins.float: ...
    @overload
    def float(self, name: builtins.str, *, required: Literal[True]) -> builtins.float: ...
    @overload
    def float(
        self, name: builtins.str, default: None = None, *, required: builtins.bool = False
    ) -> builtins.float | None: ...
    def float(
        self, name: builtins.str, default: builtins.float | None = None, *, required: builtins.bool = False
    ) -> builtins.float | None:
        value = self.str(name, required=required)
        if value is None:
            return default
        return parse_float(value, name)

    def bool(self, name: builtins.str, default: builtins.bool | None = None) -> builtins.bool | None:
        value = self.str(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise invalid(f'The specified parameter "{name}" is not a boolean: {value!r}.')

    def list(self, name: builtins.str) -> builtins.list[builtins.str]:
        """``Name.1``, ``Name.2``, ... in index order (gaps tolerated)."""
        prefix = name + "."
        items: builtins.list[builtins.tuple[builtins.int, builtins.str]] = []
        for key, value in self.raw.items():
            if key.startswith(prefix):
                rest = key[len(prefix) :]
                if rest.isdigit():
                    items.append((int(rest), value))
        return [value for _, value in sorted(items)]

    def objects(self, name: builtins.str) -> builtins.list[builtins.dict[builtins.str, Any]]:
        """``Name.N.Field[.Sub...]`` as a list of nested dicts in index order."""
        prefix = name + "."
        grouped: builtins.dict[builtins.int, builtins.dict[builtins.str, Any]] = {}
        for key, value in self.raw.items():
            if not key.startswith(prefix):
                continue
            index, _, field = key[len(prefix) :].partition(".")
            if not index.isdigit() or not field:
                continue
            _set_path(grouped.setdefault(int(index), {}), field.split("."), value)
        return [grouped[i] for i in sorted(grouped)]

    def nested(self, name: builtins.str) -> builtins.dict[builtins.str, Any]:
        """``Name.Field.Sub`` (a flattened model, e.g. ``Escalations.Critical.Threshold``) as a dict."""
        prefix = name + "."
        result: builtins.dict[builtins.str, Any] = {}
        for key, value in self.raw.items():
            if key.startswith(prefix):
                _set_path(result, key[len(prefix) :].split("."), value)
        return result

    def json(self, name: builtins.str, default: Any = None) -> Any:
        value = self.str(name)
        if value is None:
            return default
        try:
            return loads_json(value)
        except ValueError:
            raise invalid(f'The specified parameter "{name}" is not valid JSON.') from None

    def one(self, name: builtins.str) -> builtins.list[builtins.str]:
        """A single-valued parameter as a list of it, or empty when absent (``VSwitchId`` beside
        ``VSwitchIds``)."""
        value = self.str(name)
        return [value] if value else []

    def json_list(self, name: builtins.str) -> builtins.list[Any]:
        value = self.json(name, [])
        if not isinstance(value, list):
            raise invalid(f'The specified parameter "{name}" must be a JSON array.')
        return value

    def time_ms(self, name: builtins.str) -> builtins.int | None:
        """A time given as epoch milliseconds or ``YYYY-MM-DD hh:mm:ss`` (UTC) or ISO 8601."""
        value = self.str(name)
        if value is None:
            return None
        return parse_time_ms(value, name)

    def time_s(self, name: builtins.str) -> builtins.float | None:
        value = self.str(name)
        if value is None:
            return None
        return parse_time_s(value, name)


def _set_path(target: dict[str, Any], path: list[str], value: str) -> None:
    for part in path[:-1]:
        nxt = target.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            target[part] = nxt
        target = nxt
    target[path[-1]] = value


def parse_time_s(value: str, name: str = "time") -> float:
    """ISO 8601 (``2024-01-01T00:00Z``, ``2024-01-01T00:00:00Z``), ``YYYY-MM-DD hh:mm:ss`` or epoch ms."""
    text = value.strip()
    if text.isdigit():
        return int(text) / 1000.0
    candidate = text.replace(" ", "T")
    if candidate.endswith("Z"):
        candidate = candidate[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(candidate)
    except ValueError:
        raise AliyunError(
            "InvalidParameter", f'The specified parameter "{name}" is not a valid time: {value!r}.'
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def parse_time_ms(value: str, name: str = "time") -> int:
    return int(round(parse_time_s(value, name) * 1000))

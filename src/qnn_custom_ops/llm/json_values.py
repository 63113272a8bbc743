"""JSON files users hand us (a checkpoint's ``config.json``, an export's ``manifest.json``) read
value by value, typed and ranged: a wrong value is one ``JsonValueError`` naming its key and
what it holds, never an exception from deep inside whatever would have used it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import ReportedError


class JsonValueError(ReportedError, ValueError):
    """A JSON file, or one value in it, that is not what its reader takes; the message names the
    key (``shape.ctx_len``) and what it holds (its readers add the file's name)."""


def _shown(value: object) -> str:
    """A value as an error shows it: short, and its JSON type said."""
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    kind = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list", dict: "an object"}
    return f"{text[:40]}{'...' if len(text) > 40 else ''} ({kind.get(type(value), 'null')})"


def load_object(path: Path, limit: int) -> dict[str, Any]:
    """The JSON object in ``path``: refused when over ``limit`` bytes, not UTF-8, not JSON,
    nested past what the parser can hold, or not an object."""
    size = path.stat().st_size
    if size > limit:
        raise JsonValueError(f"{size} bytes, more than the {limit} such a file holds")
    try:
        body = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise JsonValueError(f"not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise JsonValueError(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise JsonValueError("nested too deeply to be read") from None
    if not isinstance(body, dict):
        raise JsonValueError(f"holds {_shown(body)}, not a JSON object")
    return body


def required(body: dict[str, Any], key: str, where: str = "") -> Any:
    """``body[key]``, or an error naming the key missing."""
    if key not in body:
        raise JsonValueError(f"no {where}{key!r}")
    return body[key]


def integer(value: object, key: str, low: int, high: int) -> int:
    """A whole number in ``[low, high]`` (a boolean, a float or a string is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise JsonValueError(f"{key} is {_shown(value)}, not a whole number from {low} to {high}")
    return value


def number(value: object, key: str, low: float = -math.inf, above: bool = False) -> float:
    """A finite number at least ``low`` (greater than it with ``above``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < low
        or (above and value == low)
    ):
        bound = f"greater than {low}" if above else f"at least {low}" if low > -math.inf else "finite"
        raise JsonValueError(f"{key} is {_shown(value)}, not a number {bound}")
    return float(value)


def string(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise JsonValueError(f"{key} is {_shown(value)}, not a string")
    return value


def mapping(value: object, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise JsonValueError(f"{key} is {_shown(value)}, not an object")
    return value


def sequence(value: object, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise JsonValueError(f"{key} is {_shown(value)}, not a list")
    return value

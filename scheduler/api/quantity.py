"""Parsing of Kubernetes resource quantities into the integer units troupe counts in.

CPU is counted in millicores, everything else in base units (bytes, counts),
rounded up as the API server's `Quantity.MilliValue()` / `Value()` do.

The node table and snapshots keep these amounts in int64 columns, so an
amount outside int64 (the API server takes `100E` cpu, 10^23 millicores) is
`QuantityRangeError`: the object says which field, instead of an
OverflowError deep in a cycle (api/resources.py, api/parse.py).
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation, Overflow

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


# The reason of the Warning Event on a Node with an allocatable out of range.
EVENT_OUT_OF_RANGE = "QuantityOutOfRange"

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
_MAX = Decimal(INT64_MAX)
_MIN = Decimal(INT64_MIN)


class QuantityError(ValueError):
    pass


class QuantityRangeError(QuantityError):
    """A valid quantity whose amount in troupe's units does not fit an int64 column."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Returns the quantity as an exact decimal in base units ("100m" -> 0.1)."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str):  # e.g. a list or a map where YAML had a typo
        raise QuantityError(f"invalid quantity {value!r}: expected a number or a string such as '500m' or '2Gi'")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"invalid quantity {value!r}")
    number, suffix = match.groups()
    if suffix not in _SUFFIXES:
        raise QuantityError(f"invalid quantity {value!r}: unknown suffix {suffix!r}")
    try:
        return Decimal(number) * _SUFFIXES[suffix]
    except Overflow:  # beyond Decimal's exponent range (`1e999999999`)
        raise QuantityRangeError(f"{value!r} is out of range") from None
    except InvalidOperation as exc:
        raise QuantityError(f"invalid quantity {value!r}") from exc


def to_units(resource: str, value: str | int | float) -> int:
    """Integer amount of `resource`: millicores for cpu, base units otherwise (ceil)."""
    if isinstance(value, str):  # nearly always, and the same few strings over and over
        return _string_units(resource, value)
    return _units(resource, value)


@functools.lru_cache(maxsize=4096)
def _string_units(resource: str, value: str) -> int:
    return _units(resource, value)


def _units(resource: str, value: str | int | float) -> int:
    try:
        q = parse_quantity(value)
        if resource == "cpu":
            q = q * 1000
    except (QuantityRangeError, Overflow):
        shown = _shown(value)
        raise QuantityRangeError(f"{shown} is out of range ({range_text(resource, shown[:1] != '-')})") from None
    if q.is_nan():  # YAML's .nan (simulate); JSON has none
        raise QuantityError(f"invalid quantity {value!r}")
    # Compared before the ceil: `1e999999999` would otherwise become an int
    # of a billion digits.
    if not _MIN <= q <= _MAX:
        raise QuantityRangeError(f"{_shown(value)} is out of range ({range_text(resource, q > 0)})")
    return int(math.ceil(q))


def range_text(resource: str, high: bool = True) -> str:
    """What `resource` may be at most (or, `high` False, at least), for messages."""
    if high:
        return f"at most {format_units(resource, INT64_MAX)}"
    return f"at least {format_units(resource, INT64_MIN)}"


def _shown(value: str | int | float) -> str:
    return value.strip() if isinstance(value, str) else str(value)


def format_units(resource: str, amount: int) -> str:
    """Human form of an amount returned by `to_units` (for messages)."""
    if resource == "cpu":
        return f"{amount}m" if amount % 1000 else str(amount // 1000)
    if resource not in ("memory", "ephemeral-storage") and not resource.startswith("hugepages-"):
        return str(amount)  # a count (pods, devices): 1024 pods are not "1Ki"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if amount and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)

"""Parsing of Kubernetes resource quantities into the integer units troupe counts in.

CPU is counted in millicores, everything else in base units (bytes, counts),
rounded up as the API server's `Quantity.MilliValue()` / `Value()` do.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation

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


class QuantityError(ValueError):
    pass


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
    q = parse_quantity(value)
    if resource == "cpu":
        q = q * 1000
    return int(math.ceil(q))


def format_units(resource: str, amount: int) -> str:
    """Human form of an amount returned by `to_units` (for messages)."""
    if resource == "cpu":
        return f"{amount}m" if amount % 1000 else str(amount // 1000)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = int(_SUFFIXES[suffix])
        if amount and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)

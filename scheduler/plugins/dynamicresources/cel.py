"""DRA device selectors: CEL expressions evaluated against one device, as
kube-scheduler's DynamicResources plugin does (k8s.io/dynamic-resource-allocation/cel).

The evaluator (the Rust cel-interpreter bindings) lacks Kubernetes' CEL
libraries, so the Quantity and Semver functions are added here as Python
functions, and `cel.bind` is rewritten into a `map` macro before compiling.
Quantities and semvers travel through CEL as tagged strings holding their
canonical form, so `==` between equal values is true and they never equal a
plain string.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from decimal import Context, Decimal
from typing import Any

import cel

from ...api.dra import Device, Version, qualified
from ...api.quantity import QuantityError, parse_quantity

_QUANTITY = "\x00q:"
_SEMVER = "\x00v:"
# Wide enough that sums of quantities stay exact (the default context keeps 28 digits).
_EXACT = Context(prec=100)
_INT64 = (-(2**63), 2**63 - 1)
# Strict semver 2.0.0 (semver.org's grammar): no leading zeros, no "v" prefix.
_SEMVER_RE = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?",
    re.ASCII,
)
_BIND = re.compile(r"(?<![\w.])cel\s*\.\s*bind\s*\(")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SelectorError(Exception):
    def __init__(self, expression: str, why: str) -> None:
        super().__init__(f'selector "{expression}": {why}')
        self.expression = expression
        self.why = why


# ------------------------------------------------------------------ values


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "Quantity" if value.startswith(_QUANTITY) else "Semver" if value.startswith(_SEMVER) else "string"
    return type(value).__name__


def _quantity_tag(value: Decimal) -> str:
    value = value.normalize(_EXACT)
    return _QUANTITY + ("0" if value.is_zero() else format(value, "f"))  # no "-0"


def _quantity_of(value: Any, fn: str) -> Decimal:
    if isinstance(value, str) and value.startswith(_QUANTITY):
        return Decimal(value[len(_QUANTITY) :])
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)  # add(int) and sub(int)
    raise TypeError(f"{fn}: expected a Quantity, got {_kind(value)}")


def _parse_semver(text: str) -> tuple[int, int, int, tuple[str, ...], str]:
    match = _SEMVER_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid semver {text!r}")
    major, minor, patch, pre, build = match.groups()
    return int(major), int(minor), int(patch), tuple(pre.split(".")) if pre else (), build or ""


def _semver_tag(text: str) -> str:
    major, minor, patch, pre, build = _parse_semver(text)
    return f"{_SEMVER}{major}.{minor}.{patch}" + ("-" + ".".join(pre) if pre else "") + ("+" + build if build else "")


def _semver_of(value: Any, fn: str) -> tuple[int, int, int, tuple[str, ...], str]:
    if isinstance(value, str) and value.startswith(_SEMVER):
        return _parse_semver(value[len(_SEMVER) :])
    raise TypeError(f"{fn}: expected a Semver, got {_kind(value)}")


def _precedence(value: Any, fn: str) -> tuple[Any, ...]:
    """Semver precedence: a release ranks above its prereleases; numeric
    identifiers rank below alphanumeric ones and compare as numbers; build is ignored."""
    major, minor, patch, pre, _ = _semver_of(value, fn)
    ids = tuple((0, int(i), "") if i.isdigit() else (1, 0, i) for i in pre)
    return (major, minor, patch, 0 if pre else 1, ids)


def _compare(a: Any, b: Any, fn: str) -> int:
    # One Python function serves the name for every receiver: dispatch on the tag.
    if _kind(a) not in ("Quantity", "Semver"):
        raise TypeError(f"{fn}: expected a Quantity or Semver receiver, got {_kind(a)}")
    if _kind(b) != _kind(a):
        raise TypeError(f"{fn}: cannot compare {_kind(a)} with {_kind(b)}")
    if _kind(a) == "Quantity":
        x, y = _quantity_of(a, fn), _quantity_of(b, fn)
        return (x > y) - (x < y)
    p, q = _precedence(a, fn), _precedence(b, fn)
    return (p > q) - (p < q)


# ------------------------------------------------------------------ CEL functions


def _quantity(text: Any) -> str:
    if not isinstance(text, str):
        raise TypeError(f"quantity: expected a string, got {_kind(text)}")
    return _quantity_tag(parse_quantity(text))


def _is_quantity(text: Any) -> bool:
    try:
        _quantity(text)
    except (QuantityError, TypeError):
        return False
    return True


def _semver(text: Any) -> str:
    if not isinstance(text, str):
        raise TypeError(f"semver: expected a string, got {_kind(text)}")
    return _semver_tag(text)


def _is_semver(text: Any) -> bool:
    return isinstance(text, str) and _SEMVER_RE.fullmatch(text) is not None


def _as_integer(q: Any) -> int:
    value = _quantity_of(q, "asInteger")
    if value != value.to_integral_value() or not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"asInteger: {value} is not an int64 integer")
    return int(value)


def _sign(q: Any) -> int:
    value = _quantity_of(q, "sign")
    return (value > 0) - (value < 0)


def _is_integer(q: Any) -> bool:
    value = _quantity_of(q, "isInteger")
    return value == value.to_integral_value() and _INT64[0] <= value <= _INT64[1]


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": lambda a, b: _compare(a, b, "compareTo"),
    "isGreaterThan": lambda a, b: _compare(a, b, "isGreaterThan") > 0,
    "isLessThan": lambda a, b: _compare(a, b, "isLessThan") < 0,
    "add": lambda a, b: _quantity_tag(_EXACT.add(_quantity_of(a, "add"), _quantity_of(b, "add"))),
    "sub": lambda a, b: _quantity_tag(_EXACT.subtract(_quantity_of(a, "sub"), _quantity_of(b, "sub"))),
    "asInteger": _as_integer,
    "isInteger": _is_integer,
    "asApproximateFloat": lambda q: float(_quantity_of(q, "asApproximateFloat")),
    "sign": _sign,
    "major": lambda v: _semver_of(v, "major")[0],
    "minor": lambda v: _semver_of(v, "minor")[1],
    "patch": lambda v: _semver_of(v, "patch")[2],
}


# ------------------------------------------------------------------ cel.bind


def _mask_strings(text: str) -> str:
    """`text` with the contents of string literals blanked (same length), so
    searches and bracket counting only see code."""
    out = list(text)
    quote = ""
    escaped = False
    for i, ch in enumerate(text):
        if not quote:
            if ch in "'\"":
                quote = ch
        elif escaped:
            escaped = False
            out[i] = " "
        elif ch == "\\":
            escaped = True
            out[i] = " "
        elif ch == quote:
            quote = ""
        else:
            out[i] = " "
    return "".join(out)


def _rewrite_binds(expression: str) -> str:
    """`cel.bind(x, init, body)` -> `[init].map(x, body)[0]`, innermost (last) first."""
    while True:
        masked = _mask_strings(expression)
        found = list(_BIND.finditer(masked))
        if not found:
            return expression
        start, i = found[-1].start(), found[-1].end()
        args, depth, arg_start = [], 0, i
        while True:
            if i >= len(masked):
                raise ValueError("cel.bind: unbalanced parentheses")
            ch = masked[i]
            if ch in "([{":
                depth += 1
            elif ch in ")]}" and depth > 0:
                depth -= 1
            elif ch in ",)" and depth == 0:
                args.append(expression[arg_start:i].strip())
                arg_start = i + 1
                if ch == ")":
                    break
            i += 1
        if len(args) != 3 or not _IDENT.fullmatch(args[0]):
            raise ValueError("cel.bind takes (identifier, init, body)")
        var, init, body = args
        expression = f"{expression[:start]}[{init}].map({var}, {body})[0]{expression[i + 1 :]}"


# ------------------------------------------------------------------ selectors


def device_variable(device: Device) -> dict[str, Any]:
    """The CEL `device` value: attributes and capacity grouped by domain."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in device.attributes.items():
        domain, _, ident = qualified(name, device.driver).partition("/")
        if isinstance(value, Version):
            # An unparsable version stays tagged so semver functions report it when used.
            value = _semver_tag(value.text) if _is_semver(value.text) else _SEMVER + value.text
        attributes.setdefault(domain, {})[ident] = value
    capacity: dict[str, dict[str, Any]] = {}
    for name, amount in device.capacity.items():
        domain, _, ident = qualified(name, device.driver).partition("/")
        capacity.setdefault(domain, {})[ident] = _quantity_tag(amount)
    return {"driver": device.driver, "attributes": attributes, "capacity": capacity}


class Selector:
    """A compiled device selector."""

    __slots__ = ("expression", "_program")

    def __init__(self, expression: str, program: cel.Program) -> None:
        self.expression = expression
        self._program = program

    def matches(self, device: Device) -> bool:
        context = cel.Context(variables={"device": device_variable(device)}, functions=_FUNCTIONS)
        try:
            result = self._program.execute(context)
        except KeyError as exc:  # a missing attribute, capacity or domain
            raise SelectorError(self.expression, f"no such key: {exc}") from exc
        except Exception as exc:  # the bindings also raise RuntimeError, ValueError, ZeroDivisionError, ...
            raise SelectorError(self.expression, f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(result, bool):
            raise SelectorError(self.expression, f"result is {_kind(result)}, not bool")
        return result


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Selector:
    """Compiles (once per expression text) a selector; SelectorError on a syntax error."""
    try:
        program = cel.compile(_rewrite_binds(expression))
    except Exception as exc:  # ValueError from the parser or from _rewrite_binds
        raise SelectorError(expression, f"syntax error: {exc}") from exc
    return Selector(expression, program)

"""Writes the reference tables of docs/configuration.md from the code: the
command line (scheduler/cli.py), every field of SchedulerConfiguration
(scheduler/api/config.py), the default plugins and the extension points each
plugin serves (scheduler/framework/framework.py), and every plugin's args
model (`Plugin.Args`).

Run `python hack/gen-config-docs.py` and review the diff. With --check it
writes nothing and exits 1 if the page is not what it would write, or if a
field has no description (`make lint` runs it that way).

Each table sits between `<!-- BEGIN GENERATED: NAME ... -->` and
`<!-- END GENERATED: NAME -->`; everything outside those markers is hand
written and kept as it is. Inside them the field, allowed values, default
and flag columns are the code's; the "what it does" column is kept from the
page (rows are matched by field), so descriptions are written in the page. A
new field starts with the comment above it in its model, or with no
description, which --check refuses.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from pydantic_core import PydanticUndefined  # noqa: E402

from scheduler import cli  # noqa: E402
from scheduler.api import config  # noqa: E402
from scheduler.framework import framework  # noqa: E402
from scheduler.plugins import in_tree_registry  # noqa: E402

PAGE = ROOT / "docs" / "configuration.md"
BEGIN = re.compile(r"^<!-- BEGIN GENERATED: ([\w-]+) .*-->$")
END = "<!-- END GENERATED: {} -->"
MISSING = "(no description yet: write one)"

# The flag of `troupe run` that overrides a field (checked against the parser).
FLAGS: dict[str, tuple[str, ...]] = {
    "healthBindAddress": ("--health-bind-address",),
    "leaderElection.leaderElect": ("--leader-elect", "--no-leader-elect"),
    "leaderElection.leaseDuration": ("--leader-elect-lease-duration",),
    "leaderElection.renewDeadline": ("--leader-elect-renew-deadline",),
    "leaderElection.retryPeriod": ("--leader-elect-retry-period",),
    "leaderElection.resourceNamespace": ("--leader-elect-resource-namespace",),
    "leaderElection.resourceName": ("--leader-elect-resource-name",),
}
# Models documented in one row rather than field by field (Kubernetes types
# the args embed as they are), by class name.
OPAQUE = {
    "NodeAffinitySpec": "a core/v1 `NodeAffinity` (`requiredDuringSchedulingIgnoredDuringExecution`, "
    "`preferredDuringSchedulingIgnoredDuringExecution`)",
}
# A model whose fields all have the same type is documented once, under a
# placeholder key (e.g. `plugins.<point>`), by class name.
PLACEHOLDERS = {"Plugins": "point"}


class DocError(Exception):
    pass


# ------------------------------------------------------------------ the models


@dataclass
class Row:
    field: str  # the path from the table's root: `leaderElection.leaseDuration`, `profiles[].plugins.<point>`
    allowed: str
    default: str
    flags: tuple[str, ...] = ()
    comment: str = ""  # the comment above the field in its model: a new row's first description


def _optional(annotation: Any) -> tuple[Any, bool]:
    """(X, True) for `X | None`, else (annotation, False)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(args) < len(get_args(annotation)):
            return args[0], True
    return annotation, False


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _list_item(annotation: Any) -> Any | None:
    return get_args(annotation)[0] if get_origin(annotation) in (list, tuple) and get_args(annotation) else None


def _comments(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the comment lines right above it in the model's source."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    out: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above: list[str] = []
            i = node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#"):
                above.insert(0, lines[i].strip().lstrip("#").strip())
                i -= 1
            if above:
                out[node.target.id] = " ".join(above)
    return out


def _defaults(model: type[BaseModel]) -> dict[str, Any] | None:
    """The model's defaults as a file writes them, or None if a field is required."""
    try:
        return model.model_validate({}).model_dump(by_alias=True)
    except Exception:
        return None


def _field_default(info: Any) -> Any:
    if info.default is not PydanticUndefined:
        return info.default
    if info.default_factory is not None:
        return info.default_factory()
    return PydanticUndefined


def _is_duration(model: type[BaseModel], name: str) -> bool:
    """A field a `before` validator reads as a Go duration ("1m30s")."""
    for dec in model.__pydantic_decorators__.field_validators.values():
        if name in dec.info.fields and dec.info.mode == "before":
            try:
                if dec.func("1m30s") == 90.0:
                    return True
            except Exception:
                continue
    return False


def _refuses_zero(model: type[BaseModel], name: str) -> bool:
    """A duration field whose validator refuses 0 (its bound is in the validator, not the field)."""
    for dec in model.__pydantic_decorators__.field_validators.values():
        if name in dec.info.fields and dec.info.mode == "before":
            try:
                dec.func(0)
            except ValueError:
                return True
    return False


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _flow(value: Any, item_model: type[BaseModel] | None = None) -> str:
    """A value as YAML flow style; an item equal to its model's defaults is `{}`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, BaseModel):
        value = value.model_dump(by_alias=True)
    if isinstance(value, Mapping):
        if item_model is not None and _all_defaults(value, item_model):
            return "{}"
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flow(v, item_model) for v in value) + "]"
    return str(value)


def _all_defaults(value: Mapping[str, Any], model: type[BaseModel]) -> bool:
    """The item is its model's defaults, leaving out the fields the model
    leaves unset (a parent fills them in: a profile's percentageOfNodesToScore)."""
    defaults = _defaults(model)
    if defaults is None:
        return False
    return all(value.get(k) == v for k, v in defaults.items() if v is not None)


def _literal_values(annotation: Any) -> tuple[Any, ...] | None:
    return get_args(annotation) if get_origin(annotation) is Literal else None


def _choices(values: tuple[Any, ...] | list[Any]) -> str:
    shown = [f"`{v}`" for v in values]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


def _bounds(metadata: list[Any]) -> tuple[list[str], list[str]]:
    """(number bounds, length bounds) of a field's constraints."""
    lo = hi = None
    numbers: list[str] = []
    lengths: list[str] = []
    for m in metadata:
        if isinstance(m, Ge):
            lo = f"{_number(m.ge)}.."
            numbers.append(f">= {_number(m.ge)}")
        elif isinstance(m, Gt):
            numbers.append(f"> {_number(m.gt)}")
        elif isinstance(m, Le):
            hi = _number(m.le)
            numbers.append(f"<= {hi}")
        elif isinstance(m, Lt):
            numbers.append(f"< {_number(m.lt)}")
        elif isinstance(m, MinLen):
            lengths.append(f"at least {m.min_length}")
        elif isinstance(m, MaxLen):
            lengths.append(f"at most {m.max_length}")
    if lo is not None and hi is not None:  # ge and le: a range
        numbers = [n for n in numbers if not n.startswith((">=", "<="))]
        numbers.insert(0, f"{lo}{hi}")
    return numbers, lengths


_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _kind(annotation: Any) -> str:
    """What a value of the annotation is, in words."""
    annotation, _ = _optional(annotation)
    if (values := _literal_values(annotation)) is not None:
        return _choices(values)
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if (item := _list_item(annotation)) is not None:
        item = _optional(item)[0]
        if _is_model(item):
            return "list of mappings"
        if (values := _literal_values(item)) is not None:
            return f"list of {_choices(values)}"
        return f"list of {_SCALARS.get(item, 'values')}s"
    if get_origin(annotation) is dict or annotation is dict or _is_model(annotation):
        return "mapping"
    return "any"


def _allowed(model: type[BaseModel], name: str, info: Any, path: str) -> str:
    annotation, _ = _optional(info.annotation)
    numbers, lengths = _bounds(info.metadata)
    if _is_duration(model, name):
        return "duration (`15s`, `1m30s`, `500ms`) or seconds" + (", > 0" if _refuses_zero(model, name) else "")
    if path == "groupSources":  # its names are the source registry's, whatever the field's type
        return f"list of {_choices(list(_group_source_names()))}"
    words = _kind(annotation)
    if annotation is str and lengths == ["at least 1"]:
        return "non-empty string"
    if lengths:
        unit = "item" if _list_item(annotation) is not None else "character"
        words += ", " + " and ".join(f"{n} {unit}{'' if n.endswith(' 1') else 's'}" for n in lengths)
    if numbers:
        words += ", " + ", ".join(numbers)
    return words


def _group_source_names() -> tuple[str, ...]:
    names = getattr(config, "GROUP_SOURCE_NAMES", None)
    if names is None:
        from scheduler.api import sources

        names = sources.optional_names()
    return tuple(names)


def _shared_type(model: type[BaseModel]) -> Any | None:
    """The one type of every field of a model shown under a placeholder key."""
    if model.__name__ not in PLACEHOLDERS:
        return None
    types_ = {info.annotation for info in model.model_fields.values()}
    return types_.pop() if len(types_) == 1 else None


def _default_text(value: Any, duration: bool, item_model: type[BaseModel] | None) -> str:
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if duration:
        return f"`{_number(value)}s`"
    return f"`{_flow(value, item_model)}`"


def model_rows(model: type[BaseModel], prefix: str = "", defaults: Mapping[str, Any] | None = None) -> Iterator[Row]:
    """A row per field of `model` (depth first, in declaration order), its
    nested models' fields under their dotted path, list items under `[]`."""
    if defaults is None:
        defaults = _defaults(model)
    shared = _shared_type(model)
    if shared is not None and _is_model(shared):
        placeholder = f"{prefix}<{PLACEHOLDERS[model.__name__]}>"
        keys = [info.alias or name for name, info in model.model_fields.items()]
        yield Row(placeholder, "one of " + ", ".join(f"`{k}`" for k in keys), "`{}`")
        yield from model_rows(shared, f"{placeholder}.")
        return
    comments = _comments(model)
    for name, info in model.model_fields.items():
        key = info.alias or name
        path = f"{prefix}{key}"
        annotation, nullable = _optional(info.annotation)
        if defaults is not None and key in defaults:
            value: Any = defaults[key]
        else:
            value = _field_default(info)
        item = _list_item(annotation)
        item = _optional(item)[0] if item is not None else None
        item_model = item if item is not None and _is_model(item) else None
        default = _default_text(value, _is_duration(model, name), item_model)
        row = Row(path, _allowed(model, name, info, path), default, FLAGS.get(path, ()))
        row.comment = comments.get(name, "")
        if _is_model(annotation) and annotation.__name__ in OPAQUE:
            row.allowed = OPAQUE[annotation.__name__]
            yield row
        elif _is_model(annotation):
            if nullable or value is None:  # an optional block: a row of its own, then its fields
                yield row
                yield from model_rows(annotation, f"{path}.")
            else:
                sub = value.model_dump(by_alias=True) if isinstance(value, BaseModel) else value
                yield from model_rows(annotation, f"{path}.", sub if isinstance(sub, Mapping) else None)
        elif item_model is not None:
            yield row
            yield from model_rows(item_model, f"{path}[].")
        else:
            yield row


def _check_flags() -> None:
    """Every flag FLAGS names is one `troupe run` has."""
    parser = cli._parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    known = {s for a in sub.choices["run"]._actions for s in a.option_strings}
    unknown = sorted({f for flags in FLAGS.values() for f in flags} - known)
    if unknown:
        raise DocError(f"hack/gen-config-docs.py FLAGS names flags `troupe run` does not have: {', '.join(unknown)}")


# ------------------------------------------------------------------- tables


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _split_row(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip())
    return [c.strip() for c in cells[1:-1]]


def field_of(cell: str) -> str:
    """The field path of a table's first cell (its first backticked word)."""
    m = re.match(r"`([^`]+)`", cell)
    return m.group(1) if m else cell


def descriptions(block: list[str]) -> dict[tuple[str, str], str]:
    """(section, field) -> the last cell of each table row of a generated block
    (section: the `###` heading above the table within the block, or "")."""
    out: dict[tuple[str, str], str] = {}
    section = ""
    for line in block:
        if line.startswith("### "):
            section = line[4:].strip()
        elif line.startswith("|") and not re.match(r"^\|\s*-", line):
            cells = _split_row(line)
            if len(cells) >= 2:
                out[(section, field_of(cells[0]))] = cells[-1]
    return out


class Tables:
    """Renders each block; descriptions come from the page's current blocks."""

    def __init__(self, old: Mapping[str, list[str]]) -> None:
        self.old = {name: descriptions(lines) for name, lines in old.items()}
        self.missing: list[str] = []

    def describe(self, block: str, section: str, field: str, seed: str = "") -> str:
        text = self.old.get(block, {}).get((section, field), "")
        if not text or text == MISSING:
            text = _cell(seed) if seed else MISSING
        if text == MISSING:
            self.missing.append(f"{block}: {section + ': ' if section else ''}{field}")
        return text

    def field_table(self, block: str, section: str, rows: list[Row]) -> list[str]:
        out = ["| field | allowed | default | what it does |", "| --- | --- | --- | --- |"]
        for r in rows:
            name = f"`{r.field}`" + "".join(f"<br>`{f}`" for f in r.flags)
            desc = self.describe(block, section, r.field, r.comment)
            out.append(f"| {name} | {_cell(r.allowed)} | {_cell(r.default)} | {desc} |")
        return out

    def configuration(self) -> list[str]:
        _check_flags()
        return self.field_table("configuration", "", list(model_rows(config.SchedulerConfiguration)))

    def flags(self) -> list[str]:
        parser = cli._parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out: list[str] = []
        for command, sp in sub.choices.items():
            out += [f"`troupe {command}`:", "", "| flag | default | what it does |", "| --- | --- | --- |"]
            for action in sp._actions:
                if isinstance(action, argparse._HelpAction):
                    continue
                if action.option_strings:
                    long_flags = [s for s in action.option_strings if s.startswith("--")]
                    metavar = action.metavar or (
                        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else ""
                    )
                    shown = " / ".join(f"`{f}{' ' + metavar if metavar and f == long_flags[0] else ''}`"
                                       for f in action.option_strings)  # fmt: skip
                else:
                    shown = f"`{action.metavar or action.dest}`"
                default = "" if action.default is None or action.default is False else f"`{_number(action.default)}`"
                out.append(f"| {_cell(shown)} | {_cell(default)} | {_cell(action.help or '')} |")
            out.append("")
        return out[:-1]

    def default_plugins(self) -> list[str]:
        out = ["| extension point | default plugins, in order (score weight) |", "| --- | --- |"]
        for point in config.EXTENSION_POINTS:
            plugins = framework.DEFAULT_PLUGINS.get(point, [])
            shown = ", ".join(f"`{n}`" + (f" (×{w})" if w is not None else "") for n, w in plugins)
            out.append(f"| `{point}` | {shown or 'none'} |")
        return out

    def plugins(self) -> list[str]:
        registry = in_tree_registry()
        point_types: Mapping[str, type] = getattr(framework, "_POINT_TYPES", {})
        out = ["| plugin | can serve | default at | args |", "| --- | --- | --- | --- |"]
        for name in _plugin_order(registry):
            cls = registry.get(name)
            assert cls is not None
            serves = [p for p in config.EXTENSION_POINTS if p in point_types and issubclass(cls, point_types[p])]
            default_at = [p for p in config.EXTENSION_POINTS if any(n == name for n, _ in framework.DEFAULT_PLUGINS[p])]
            has_args = bool(cls.Args.model_fields)
            args = f"[{name}](#{name.lower()})" if has_args else "none"
            out.append(f"| `{name}` | {', '.join(serves)} | {', '.join(default_at) or 'not by default'} | {args} |")
        return out

    def plugin_args(self) -> list[str]:
        registry = in_tree_registry()
        out: list[str] = []
        for name in _plugin_order(registry):
            cls = registry.get(name)
            assert cls is not None
            model = cls.Args
            if not model.model_fields:
                continue
            out += [f"### {name}", ""]
            doc = model.__dict__.get("__doc__")
            if doc:
                out += [" ".join(inspect.cleandoc(doc).split("\n\n")[0].split()), ""]
            out += self.field_table("plugin-args", name, list(model_rows(model)))
            out.append("")
        return out[:-1]


def _plugin_order(registry: Any) -> list[str]:
    """The in-tree plugins in the order the package lists them."""
    from scheduler import plugins

    listed = [p.name for p in getattr(plugins, "IN_TREE", ())]
    return [n for n in listed if registry.get(n) is not None] + [n for n in registry.names() if n not in listed]


# --------------------------------------------------------------------- page


def split_page(text: str) -> tuple[list[str | tuple[str, list[str]]], dict[str, list[str]]]:
    """The page as hand-written lines and generated blocks (name, old lines)."""
    parts: list[str | tuple[str, list[str]]] = []
    blocks: dict[str, list[str]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if m is None:
            parts.append(lines[i])
            i += 1
            continue
        name = m.group(1)
        try:
            end = lines.index(END.format(name), i + 1)
        except ValueError:
            raise DocError(f"{PAGE}:{i + 1}: `{lines[i]}` has no `{END.format(name)}`") from None
        parts.append(lines[i])
        blocks[name] = lines[i + 1 : end]
        parts.append((name, lines[i + 1 : end]))
        parts.append(lines[end])
        i = end + 1
    return parts, blocks


BLOCKS = ("flags", "configuration", "default-plugins", "plugins", "plugin-args")


def render(text: str) -> tuple[str, list[str]]:
    """The page with its generated blocks rewritten, and the fields with no description."""
    parts, old = split_page(text)
    absent = [b for b in BLOCKS if b not in old]
    if absent:
        raise DocError(f"{PAGE}: no generated block {', '.join(absent)} (add BEGIN/END GENERATED markers)")
    unknown = [b for b in old if b not in BLOCKS]
    if unknown:
        raise DocError(f"{PAGE}: unknown generated block {', '.join(unknown)} (known: {', '.join(BLOCKS)})")
    tables = Tables(old)
    makers = {
        "flags": tables.flags,
        "configuration": tables.configuration,
        "default-plugins": tables.default_plugins,
        "plugins": tables.plugins,
        "plugin-args": tables.plugin_args,
    }
    out: list[str] = []
    for part in parts:
        if isinstance(part, tuple):
            out += makers[part[0]]()
        else:
            out.append(part)
    return "\n".join(out) + "\n", tables.missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", nargs="?", type=Path, default=PAGE, help=f"the page (default: {PAGE.relative_to(ROOT)})")
    ap.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 with a diff if the page is not what would be written",
    )
    args = ap.parse_args()
    try:
        current = args.page.read_text()
        wanted, missing = render(current)
    except (OSError, DocError) as exc:
        print(f"gen-config-docs: {exc}", file=sys.stderr)
        return 1
    status = 0
    if args.check:
        if wanted != current:
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    wanted.splitlines(keepends=True),
                    f"{args.page} (now)",
                    f"{args.page} (from the code)",
                )
            )
            print(f"gen-config-docs: {args.page} is out of date: run python hack/gen-config-docs.py", file=sys.stderr)
            status = 1
    elif wanted != current:
        args.page.write_text(wanted)
        print(f"gen-config-docs: wrote {args.page}")
    for field in missing:
        print(f"gen-config-docs: {args.page}: no description for {field}", file=sys.stderr)
    return 1 if args.check and missing else status


if __name__ == "__main__":
    sys.exit(main())

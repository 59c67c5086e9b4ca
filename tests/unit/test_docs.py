"""README.md, docs/*.md and bench/README.md say only what exists: every
relative link reaches a file and every `#anchor` a heading (GitHub's slugs),
every configuration field they name is one troupe reads, and every metric
they name is one troupe exports.

What counts as naming a configuration field (nothing else is checked, so
that Kubernetes fields such as `spec.schedulingGroup.podGroupName` are never
taken for troupe's):

- every document of a ```yaml block with `kind: SchedulerConfiguration`,
  validated as `troupe run` would (the in-tree plugins' args too);
- the first cell of each row of docs/configuration.md's generated tables
  (hack/gen-config-docs.py), against SchedulerConfiguration or, under a
  `### Plugin` heading of the plugin-args block, that plugin's args;
- inline code that is a dotted path of lowerCamelCase keys (`[]`, `[0]` and
  `<point>` allowed) whose first key is a top-level key of the file
  (`queue.podMaxBackoffSeconds`, `profiles[].podGroupScheduling.searchSteps`)
  or a key of a plugin's args that holds a mapping (`scoringStrategy.type`);
- inline code that is one lowerCamelCase word very like a key of the file or
  of a plugin's args, but not one (`starvationSecond`).

A metric is inline code that is `scheduler_` or `troupe_` and at least two
more words (`troupe_plugin_cache_flushes_total{cache,reason}` names
`troupe_plugin_cache_flushes_total`; `scheduler_names`, an attribute, and
`scheduler_perf`, upstream's benchmarks, name none).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
import yaml
from prometheus_client import REGISTRY
from pydantic import BaseModel, ValidationError

from scheduler.api.config import PluginConfig, Profile, SchedulerConfiguration, validate_args
from scheduler.plugins import in_tree_registry

from .test_monitoring import exported_series

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])

# Inline code that looks like a metric but is not one: the example plugin's package.
NOT_METRICS = {"troupe_example_plugin"}

_FENCE = re.compile(r"^ {0,3}(```+|~~~+)")


# ----------------------------------------------------------------- markdown


def blocks(text: str) -> Iterator[tuple[str, str]]:
    """The fenced code blocks of a page: (info string, body)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, info = m.group(1), lines[i][m.end() :].strip()
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        yield info, "\n".join(body)
        i += 1


def prose(text: str) -> str:
    """The page without its fenced code blocks (their lines left empty)."""
    out: list[str] = []
    fence = ""
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence:
            if line.strip().startswith(fence):
                fence = ""
            out.append("")
        elif m is not None:
            fence = m.group(1)
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


_CODE = re.compile(r"(`+)(.+?)\1", re.S)


def inline_code(text: str) -> list[str]:
    return [m.group(2).strip() for m in _CODE.finditer(prose(text))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links and HTML dropped)
    lowercased, punctuation but `-` and `_` removed, each space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    return "".join(c for c in text.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def anchors(text: str) -> set[str]:
    """Every anchor a page has: its headings' slugs, a repeated one with
    -1, -2, ... as GitHub numbers them, and `<a id=...>`/`<a name=...>`."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    body = prose(text)
    for line in body.splitlines():
        m = _HEADING.match(line)
        if m is None:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    out.update(_HTML_ANCHOR.findall(body))
    return out


_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)


def links(text: str) -> list[str]:
    """The targets of a page's links and images (not in code)."""
    body = _CODE.sub("", prose(text))
    return [m.group(1) for m in _LINK.finditer(body)] + _REF_DEF.findall(body)


def link_problems(page: Path, text: str) -> list[str]:
    problems = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        if not path:  # this page
            if anchor not in anchors(text):
                problems.append(f"{target}: no heading with the anchor #{anchor} in {page.name}")
            continue
        dest = (page.parent / path).resolve()
        if not dest.exists():
            problems.append(f"{target}: no such file ({dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})")
            continue
        if not anchor:
            continue
        if dest.suffix == ".md" and dest.is_file():
            if anchor not in anchors(dest.read_text()):
                problems.append(f"{target}: no heading with the anchor #{anchor} in {dest.name}")
        elif not re.fullmatch(r"L\d+(-L\d+)?", anchor):  # a line of a source file
            problems.append(f"{target}: #{anchor} is not a heading or a line")
    return problems


# ------------------------------------------------------ configuration fields


@cache
def args_models() -> dict[str, type[BaseModel]]:
    return in_tree_registry().args_models()


def _optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, type(int | None)):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


_SEGMENT = re.compile(r"^([A-Za-z][A-Za-z0-9]*|<[a-z]+>)((?:\[\d*\])*)$")


def resolves(model: type[BaseModel], path: str) -> bool:
    """Whether the dotted path names a field of `model` (through nested
    models and list items; `<x>` is any field of a model; past a plugin's
    `args`, a field of some plugin's args)."""
    annotation: Any = model
    parts = path.split(".")
    for i, part in enumerate(parts):
        m = _SEGMENT.match(part)
        annotation = _optional(annotation)
        if m is None or not _is_model(annotation):
            return False
        name, index = m.groups()
        fields = annotation.model_fields
        if name.startswith("<"):
            info = next(iter(fields.values()))
        else:
            info = next((f for n, f in fields.items() if name in (n, f.alias)), None)
            if info is None:
                return False
        if annotation is PluginConfig and name == "args":
            rest = ".".join(parts[i + 1 :])
            return not rest or any(resolves(args, rest) for args in args_models().values())
        annotation = info.annotation
        for _ in range(index.count("[")):
            annotation = _optional(annotation)
            if get_origin(annotation) is not list:
                return False
            annotation = get_args(annotation)[0]
        if get_origin(_optional(annotation)) is dict and i < len(parts) - 1:
            return True  # a free-form mapping (a selector): its keys are not fields
    return True


_PATH = re.compile(r"^[a-z][A-Za-z0-9]*(?:\[\d*\])*(?:\.(?:[a-z][A-Za-z0-9]*|<[a-z]+>)(?:\[\d*\])*)+$")
_FILE_SUFFIXES = {"py", "md", "yaml", "yml", "json", "toml", "txt", "sh", "go", "png"}


def _config_roots() -> set[str]:
    return {f.alias or n for n, f in SchedulerConfiguration.model_fields.items()} - {"apiVersion", "kind"}


def _args_roots() -> dict[str, list[type[BaseModel]]]:
    """Keys of plugin args that hold a mapping or a list of them, and the
    models that have them (`resources` is left out: it is a pod's field too)."""
    roots: dict[str, list[type[BaseModel]]] = {}
    for model in args_models().values():
        for n, f in model.model_fields.items():
            inner = _optional(f.annotation)
            if get_origin(inner) is list:
                inner = _optional(get_args(inner)[0])
            if _is_model(inner) and (f.alias or n) != "resources":
                roots.setdefault(f.alias or n, []).append(model)
    return roots


def field_mentions(text: str) -> list[str]:
    """The inline code of a page that names a configuration field (module docstring)."""
    roots = _config_roots() | set(_args_roots())
    out = []
    for code in inline_code(text):
        code = re.sub(r"\s*[:=].*$", "", code)  # `podGroupScheduling.algorithm: Default`
        path_like = _PATH.match(code) and code.split(".")[-1] not in _FILE_SUFFIXES
        if path_like and re.match(r"[a-zA-Z0-9]+", code).group(0) in roots:  # type: ignore[union-attr]
            out.append(code)
    return out


def _mention_resolves(path: str) -> bool:
    root = re.match(r"[a-zA-Z0-9]+", path).group(0)  # type: ignore[union-attr]
    if root in _config_roots():
        return resolves(SchedulerConfiguration, path)
    return any(resolves(model, path) for model in _args_roots().get(root, []))


def yaml_config_problems(text: str) -> list[str]:
    """Each SchedulerConfiguration in a ```yaml block, validated with its in-tree plugins' args."""
    problems = []
    for info, body in blocks(text):
        if info.split()[:1] not in (["yaml"], ["yml"]) or not re.search(r"^kind:\s*SchedulerConfiguration", body, re.M):
            continue
        try:
            docs = list(yaml.safe_load_all(body))
        except yaml.YAMLError as exc:
            problems.append(f"a SchedulerConfiguration block is not valid YAML: {exc}")
            continue
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("kind") != "SchedulerConfiguration":
                continue
            try:
                config = SchedulerConfiguration.model_validate(doc)
            except ValidationError as exc:
                problems += [f"SchedulerConfiguration block: {e['loc']}: {e['msg']}" for e in exc.errors()]
                continue
            for i, profile in enumerate(config.profiles):
                problems += _plugin_config_problems(profile, i)
    return problems


def _plugin_config_problems(profile: Profile, i: int) -> list[str]:
    """The in-tree plugins' args of a profile; a third-party plugin's (an
    example's) are not known here."""
    problems = []
    for j, entry in enumerate(profile.plugin_config):
        model = args_models().get(entry.name)
        if model is not None:
            problems += validate_args(model, entry.args, ("profiles", i, "pluginConfig", j, "args"))[1]
    return problems


def table_field_problems(text: str) -> list[str]:
    """The field cells of the generated tables of docs/configuration.md."""
    problems = []
    block = section = ""
    for line in text.splitlines():
        if m := re.match(r"^<!-- BEGIN GENERATED: ([\w-]+)", line):
            block, section = m.group(1), ""
        elif line.startswith("<!-- END GENERATED"):
            block = ""
        elif block in ("configuration", "plugin-args"):
            if line.startswith("### "):
                section = line[4:].strip()
            elif line.startswith("| `"):
                field = re.match(r"\| `([^`]+)`", line).group(1)  # type: ignore[union-attr]
                model = SchedulerConfiguration if block == "configuration" else args_models().get(section)
                if model is None:
                    problems.append(f"plugin-args: {section} is not an in-tree plugin with args")
                elif not resolves(model, field):
                    problems.append(f"{block}{': ' + section if section else ''}: `{field}` is not a field")
    return problems


@cache
def config_keys() -> frozenset[str]:
    """Every key of the file and of the in-tree plugins' args, at any depth."""
    keys: set[str] = set()

    def walk(model: type[BaseModel]) -> None:
        for n, f in model.model_fields.items():
            keys.add(f.alias or n)
            inner = _optional(f.annotation)
            if get_origin(inner) is list:
                inner = _optional(get_args(inner)[0])
            if _is_model(inner) and inner is not model:
                walk(inner)

    for model in (SchedulerConfiguration, *args_models().values()):
        walk(model)
    return frozenset(keys)


def misspelt_keys(text: str) -> list[str]:
    """Inline code that is one lowerCamelCase word very like a configuration
    key but not one (`starvationSecond`): taken for a misspelt key. Words
    unlike every key (Kubernetes fields) are left alone."""
    out = []
    for code in inline_code(text):
        if re.fullmatch(r"[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*", code) and code not in config_keys():
            close = difflib.get_close_matches(code, config_keys(), n=1, cutoff=0.85)
            if close:
                out.append(f"`{code}` is not a configuration field (did you mean `{close[0]}`?)")
    return out


def field_problems(text: str) -> list[str]:
    problems = [f"`{p}` is not a configuration field" for p in field_mentions(text) if not _mention_resolves(p)]
    return problems + misspelt_keys(text) + yaml_config_problems(text) + table_field_problems(text)


# ------------------------------------------------------------------ metrics


def metric_mentions(text: str) -> list[str]:
    out = []
    for code in inline_code(text):
        m = re.match(r"^((?:scheduler|troupe)_[a-z0-9]+_[a-z0-9_]*[a-z0-9])(?:$|[{\[\s])", code)
        if m and m.group(1) not in NOT_METRICS:
            out.append(m.group(1))
    return out


def exported_names() -> set[str]:
    """Every series /metrics can show, and a histogram's or summary's own name
    (how one names it: `..._duration_seconds`, not `..._duration_seconds_bucket`)."""
    families = {f.name for f in REGISTRY.collect() if f.type in ("histogram", "summary", "gaugehistogram")}
    return exported_series() | families


def metric_problems(text: str) -> list[str]:
    exported = exported_names()
    return [f"`{name}` is not a metric troupe exports" for name in metric_mentions(text) if name not in exported]


# -------------------------------------------------------------------- tests


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_links_and_anchors(page: Path) -> None:
    assert link_problems(page, page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_configuration_fields(page: Path) -> None:
    assert field_problems(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_metrics(page: Path) -> None:
    assert metric_problems(page.read_text()) == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for t in links(readme.read_text())}
    assert sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked) == []


def test_slugs_as_github_makes_them() -> None:
    assert slug("Group sources: which group a pod belongs to") == "group-sources-which-group-a-pod-belongs-to"
    assert slug("Trying it without a cluster: `troupe simulate`") == "trying-it-without-a-cluster-troupe-simulate"
    assert slug("`CycleState.retry_within`") == "cyclestateretry_within"
    assert slug("Soak (`python -m bench.soak --minutes 30`)") == "soak-python--m-benchsoak---minutes-30"
    assert slug("See [the docs](docs/x.md) — 2× faster") == "see-the-docs--2-faster"
    text = '# A\n\n## Same\n\n```\n# not a heading\n```\n\n## Same\n#140611) not one either\n<a id="here"></a>\n'
    assert anchors(text) == {"a", "same", "same-1", "here"}


def test_the_checks_find_what_is_broken(tmp_path: Path) -> None:
    """Each check on a small page with one broken thing of each kind (and
    the same things unbroken, which must pass)."""
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    page = tmp_path / "page.md"
    text = """# Title

## Links

[ok](other.md) [ok](other.md#a-section) [ok](#links) [ok](code.py#L1) [ok](https://example.com/#x)
[bad file](missing.md) [bad anchor](other.md#no-such-section) [bad own anchor](#nowhere)
[bad line](code.py#top) ![bad image](img.png)
`[not a link](missing-too.md)`

```
[not a link either](missing-three.md)
```

Fields: `queue.podMaxBackoffSeconds`, `profiles[0].podGroupScheduling.searchSteps`,
`profiles[].plugins.<point>.enabled[].weight`, `scoringStrategy.type`,
`profiles[0].pluginConfig[1].args.scoringStrategy.type`, `spec.schedulingGroup.podGroupName`,
`watch.py`, `queue.SchedulingQueue`, and wrong: `queue.podMaxBackoff`, `leaderElection.leaseDurationSeconds`,
`scoringStrategy.kind`, `profiles[].pluginConfig[].args.starvationSecond`, `maxReservationSecond`.
Not fields, and not like one: `minCount`, `activeDeadlineSeconds`; a field: `searchSteps`.

Metrics: `scheduler_pending_pods`, `troupe_plugin_cache_flushes_total{cache,reason}`,
`scheduler_scheduling_attempt_duration_seconds_bucket`,
`scheduler_scheduling_attempt_duration_seconds`, `scheduler_perf`, `scheduler_names`, `troupe_example_plugin`,
and wrong: `troupe_no_such_metric`.

```yaml
apiVersion: scheduling.troupe.dev/v1alpha1
kind: SchedulerConfiguration
profiles:
- schedulerName: troupe-scheduler
  pluginConfig:
  - name: Reservation
    args: {starvationSecond: 10}
  - name: SomeonesPlugin
    args: {anything: 1}
queue: {podMaxBackoffSecond: 3}
```

<!-- BEGIN GENERATED: configuration (test) -->
| field | allowed | default | what it does |
| --- | --- | --- | --- |
| `stallSeconds` | number | `60` | ok |
| `stallSecond` | number | `60` | wrong |
<!-- END GENERATED: configuration -->
<!-- BEGIN GENERATED: plugin-args (test) -->
### Reservation

| field | allowed | default | what it does |
| --- | --- | --- | --- |
| `maxReservedShare` | number | `0.5` | ok |
| `maxReservedShares` | number | `0.5` | wrong |
<!-- END GENERATED: plugin-args -->
"""
    assert link_problems(page, text) == [
        "missing.md: no such file (" + str(tmp_path / "missing.md") + ")",
        "other.md#no-such-section: no heading with the anchor #no-such-section in other.md",
        "#nowhere: no heading with the anchor #nowhere in page.md",
        "code.py#top: #top is not a heading or a line",
        "img.png: no such file (" + str(tmp_path / "img.png") + ")",
    ]
    problems = field_problems(text)
    assert [p for p in problems if "SchedulerConfiguration" not in p] == [
        "`queue.podMaxBackoff` is not a configuration field",
        "`leaderElection.leaseDurationSeconds` is not a configuration field",
        "`scoringStrategy.kind` is not a configuration field",
        "`profiles[].pluginConfig[].args.starvationSecond` is not a configuration field",
        "`maxReservationSecond` is not a configuration field (did you mean `maxReservationSeconds`?)",
        "`stallSecond` is not a configuration field (did you mean `stallSeconds`?)",
        "`maxReservedShares` is not a configuration field (did you mean `maxReservedShare`?)",
        "configuration: `stallSecond` is not a field",
        "plugin-args: Reservation: `maxReservedShares` is not a field",
    ]
    yaml_problems = [p for p in problems if "SchedulerConfiguration" in p]
    assert len(yaml_problems) == 1 and "podMaxBackoffSecond" in yaml_problems[0]
    assert metric_problems(text) == ["`troupe_no_such_metric` is not a metric troupe exports"]

    # The plugin args of a block that is otherwise valid are checked too.
    valid_but_args = text.replace("queue: {podMaxBackoffSecond: 3}", "")
    assert [p for p in field_problems(valid_but_args) if "starvationSecond" in p and "args" in p][-1].startswith(
        "profiles[0].pluginConfig[0].args.starvationSecond: unknown field"
    )

"""crds/compat/ holds scheduler-plugins' and Volcano's PodGroup CRDs for
clusters that have neither: field-compatible with the originals (vendored in
tests/crds/), so that an object one accepts the other accepts, and every
operator reads back what it wrote. Only prose may differ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [
    ("podgroups.scheduling.x-k8s.io.yaml", "scheduling.x-k8s.io_podgroups.yaml"),
    ("podgroups.scheduling.volcano.sh.yaml", "scheduling.volcano.sh_podgroups.yaml"),
]


def load(path: Path) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return doc


def without_prose(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: without_prose(v) for k, v in x.items() if k != "description"}
    if isinstance(x, list):
        return [without_prose(v) for v in x]
    return x


def fields(schema: dict[str, Any], path: str = "") -> set[str]:
    out = {path or "."}
    for k, sub in (schema.get("properties") or {}).items():
        out |= fields(sub, f"{path}.{k}")
    if "items" in schema:
        out |= fields(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        out |= fields(schema["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize("compat_name,original_name", PAIRS)
def test_compat_crd_is_the_original_schema_field_for_field(compat_name: str, original_name: str) -> None:
    compat = load(ROOT / "crds" / "compat" / compat_name)
    original = load(ROOT / "tests" / "crds" / original_name)
    assert compat["metadata"]["name"] == original["metadata"]["name"]
    for key in ("group", "names", "scope"):
        assert compat["spec"][key] == original["spec"][key], key
    (cv,), (ov,) = compat["spec"]["versions"], original["spec"]["versions"]
    for key in ("name", "served", "storage", "subresources"):
        assert cv[key] == ov[key], key  # Volcano's: no status subresource, and troupe writes accordingly
    assert [(c["name"], c["type"], c["jsonPath"], c.get("priority")) for c in cv["additionalPrinterColumns"]] == [
        (c["name"], c["type"], c["jsonPath"], c.get("priority")) for c in ov["additionalPrinterColumns"]
    ]
    cs, os_ = cv["schema"]["openAPIV3Schema"], ov["schema"]["openAPIV3Schema"]
    assert fields(cs) == fields(os_)  # the same field paths, reported as sets first for a readable diff
    assert without_prose(cs) == without_prose(os_)  # then types, formats, bounds, defaults, enums


@pytest.mark.parametrize("compat_name,_", PAIRS)
def test_every_compat_field_says_what_troupe_does_with_it(compat_name: str, _: str) -> None:
    schema = load(ROOT / "crds" / "compat" / compat_name)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in ("spec", "status"):
        for name, sub in schema["properties"][part]["properties"].items():
            assert sub.get("description"), f"{compat_name}: {part}.{name} has no description"


def test_default_install_does_not_apply_compat() -> None:
    """`kubectl apply -f crds/` is not recursive: crds/compat/ is applied only by hand.
    What it applies (crds/*.yaml) defines troupe's own kinds, none of the compat ones."""
    crds = ROOT / "crds"
    assert sorted(p.relative_to(crds).as_posix() for p in crds.rglob("podgroups.scheduling.[xv]*.yaml")) == sorted(
        f"compat/{compat}" for compat, _ in PAIRS
    )
    applied = {load(p)["spec"]["group"] for p in crds.glob("*.yaml")}
    assert applied == {"scheduling.troupe.dev"}, applied

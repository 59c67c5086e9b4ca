"""Shapes r (DRA claims) and g (extended resource) of the core benchmark, on
small clusters through the same runner as `python -m bench core --shapes g,r`:
every pod placed, every gang bound whole, no device allocated twice, each
claim's device on its pod's node; and the check sees a device allocated twice."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is not an installed package
    sys.path.insert(0, str(ROOT))

from bench.core import (  # noqa: E402
    _feed,
    _new_scheduler,
    devices_check,
    devices_problems,
    devices_ratio,
    main,
    render_devices,
    run_vectorized,
)
from bench.shapes import (  # noqa: E402
    DRA,
    DRA_DRIVER,
    EXTENDED,
    QUICK,
    Shape,
    pod_body,
    resource_claim_body,
    resource_slice_body,
    shape_node_body,
)

# 10 nodes of 8 GPUs = 80 devices for 21 gangs of 4 = 84 pods: 20 gangs fit, the last one cannot.
TIGHT_R = Shape("r", "DRA/10Nodes_21Gangs_84Pods_8DevicesPerNode", 10, 21, 4, None, DRA, 8)
TIGHT_G = Shape("g", "ExtendedResource/10Nodes_21Gangs_84Pods_8GPUsPerNode", 10, 21, 4, None, EXTENDED, 8)


@pytest.fixture(scope="module")
def quick_runs() -> dict[str, dict[str, Any]]:
    return {key: run_vectorized(QUICK[key], "default", None) for key in ("g", "r")}


def test_bodies() -> None:
    r, g = QUICK["r"], QUICK["g"]
    assert (r.nodes, r.gangs, r.pods_per_gang, r.devices_per_node) == (500, 50, 4, 8)
    node = shape_node_body(r, 3)["status"]["allocatable"]
    assert node == {"pods": "110", "cpu": "4", "memory": "32Gi"}
    assert shape_node_body(g, 3)["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    s = resource_slice_body(r, 3)
    assert s["metadata"]["name"] == "node-00003-gpus"
    assert s["spec"]["pool"] == {"name": "node-00003", "generation": 1, "resourceSliceCount": 1}
    assert s["spec"]["driver"] == DRA_DRIVER and len(s["spec"]["devices"]) == 8
    pod = pod_body(r, 7)
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "pod-000007"}]
    assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"]["requests"]
    res = pod_body(g, 7)["spec"]["containers"][0]["resources"]
    assert res["requests"]["nvidia.com/gpu"] == "1" and res["limits"] == {"nvidia.com/gpu": "1"}
    assert "resourceClaims" not in pod_body(g, 7)["spec"]
    claim = resource_claim_body(7)
    assert claim["metadata"]["name"] == "pod-000007" and "status" not in claim


@pytest.mark.parametrize("key", ["r", "g"])
def test_quick_shape_places_every_pod(quick_runs: dict[str, dict[str, Any]], key: str) -> None:
    shape, got = QUICK[key], quick_runs[key]
    assert got["pods_placed"] == got["pods_bound"] == shape.pods
    assert got["left_in_queue"] == 0
    check = got["devices"]
    assert devices_problems(check) == []
    assert check["gangs_bound_whole"] == shape.gangs and check["gangs_partly_bound"] == 0
    if key == "r":
        assert check["devices_allocated_twice"] == 0
        assert check["claims_off_node"] == 0
        assert check["claims_allocated"] == check["devices_allocated"] == shape.pods
        assert check["claims_only_assumed"] == 0  # every allocation confirmed as the API would show it
    else:
        assert check["nodes_over_capacity"] == 0


@pytest.mark.parametrize("shape", [TIGHT_R, TIGHT_G], ids=["r", "g"])
def test_devices_run_out(shape: Shape) -> None:
    """Every device taken, none twice; the gang that does not fit is not bound at all."""
    got = run_vectorized(shape, "default", None)
    capacity = shape.nodes * shape.devices_per_node
    assert got["pods_placed"] == got["pods_bound"] == capacity
    check = got["devices"]
    assert check["gangs_bound_whole"] == capacity // shape.pods_per_gang
    assert check["gangs_partly_bound"] == 0
    if shape.devices == DRA:
        assert check["devices_allocated"] == capacity
        assert check["devices_allocated_twice"] == check["claims_off_node"] == 0
        assert check["claims_only_assumed"] == 0
    else:
        assert check["nodes_over_capacity"] == 0


def test_check_sees_a_device_allocated_twice_and_off_node() -> None:
    shape = TIGHT_R
    sched = _new_scheduler("default")
    _feed(sched, shape)
    same = {"devices": {"results": [{"request": "gpu", "driver": DRA_DRIVER, "pool": "node-00000", "device": "gpu-0"}]}}
    for i in (0, 1):
        sched.on_resource_claim(resource_claim_body(i, same, resource_version="2"))
    check = devices_check(shape, sched, {0: "node-00000", 1: "node-00001", 2: "node-00002"})
    assert check["devices_allocated_twice"] == 1
    assert check["claims_off_node"] == 1  # pod 1 is on node-00001, its device on node-00000
    assert check["placed_without_allocation"] == 1  # pod 2
    problems = devices_problems(check)
    assert "1 devices allocated twice" in problems
    assert any("gangs bound whole" in p for p in problems)  # nothing was bound


def test_render_and_ratio(quick_runs: dict[str, dict[str, Any]]) -> None:
    result: dict[str, Any] = {"shapes": []}
    for key in ("g", "r"):
        shape, got = QUICK[key], quick_runs[key]
        result["shapes"].append(
            {
                "key": key,
                "name": shape.name,
                "gangs": shape.gangs,
                "pods": shape.pods,
                "devices": shape.devices,
                "default": got,
                "default_runs_pods_per_s": [got["pods_per_s"]],
            }
        )
    ratio = devices_ratio(result)
    assert ratio is not None
    assert ratio["ratio"] == pytest.approx(quick_runs["g"]["pods_per_s"] / quick_runs["r"]["pods_per_s"])
    assert ratio["ok"] == (ratio["ratio"] <= 3.0)
    result["devices_ratio"] = ratio
    text = render_devices(result)
    assert "devices allocated twice" in text and "extended resource ÷ DRA (g ÷ r)" in text
    assert ("ok" if ratio["ok"] else "MISS") in text.splitlines()[-1]
    assert devices_ratio({"shapes": result["shapes"][:1]}) is None


def test_command_writes_the_ratio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "core.json"
    assert main(["--shapes", "g,r", "--quick", "--repeat", "1", "--no-reference", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [s["key"] for s in result["shapes"]] == ["g", "r"]
    assert result["devices_ratio"]["target"] == 3.0
    r = result["shapes"][1]
    assert "full" not in r and "reference" not in r  # the reference knows no devices
    assert r["default"]["devices"]["devices_allocated_twice"] == 0
    assert "g ÷ r" in capsys.readouterr().out

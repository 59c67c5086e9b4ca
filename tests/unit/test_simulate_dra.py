"""`troupe simulate` with DRA objects: DeviceClasses, ResourceSlices,
ResourceClaims and ResourceClaimTemplates go to the scheduler, the runner
writes what PreBind and the claim lifecycle would, and the output shows each
pod's devices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.api.config import SchedulerConfiguration
from scheduler.api.records import GroupKey
from scheduler.cli import main
from scheduler.plugins import in_tree_registry
from scheduler.simulate import InputError, SimulationResult, load_text, render_json, render_table, simulate
from scheduler.simulate import runner as runner_module

from .test_simulate import dump, node, pod, podgroup, priority_class, run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulate-dra.yaml"
DRIVER = "gpu.example.com"
RESOURCE = "resource.k8s.io/v1"


# ----------------------------------------------------------------- builders


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def gpus(node_name: str, count: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(count)],
        },
    }


def claim_spec() -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}


def claim(name: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": claim_spec(),
    }
    if status is not None:
        body["status"] = status
    return body


def template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"spec": claim_spec()},
    }


def gpu_pod(
    name: str, group: str | None = None, claim_name: str | None = None, template_name: str | None = None, **kw: Any
) -> dict[str, Any]:
    body = pod(name, group, **{"cpu": "100m", **kw})
    ref = {"resourceClaimName": claim_name} if claim_name else {"resourceClaimTemplateName": template_name}
    body["spec"]["resourceClaims"] = [{"name": "gpu", **ref}]
    return body


def gpu_gang(name: str, n: int) -> list[dict[str, Any]]:
    """A gang of n pods, each with its own claim `<pod>-gpu`."""
    docs = [podgroup(name, n)]
    for i in range(n):
        docs += [claim(f"{name}-{i}-gpu"), gpu_pod(f"{name}-{i}", name, f"{name}-{i}-gpu")]
    return docs


def cluster(gpus_per_node: int = 2) -> list[dict[str, Any]]:
    return [node("n0"), node("n1"), device_class(), gpus("n0", gpus_per_node), gpus("n1", gpus_per_node)]


def allocated(device: str, pool: str = "n0", reserved_for: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A claim status as the API shows it once allocated on `pool`'s node."""
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pool]}]}]}
    return {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}]},
            "nodeSelector": selector,
        },
        "reservedFor": reserved_for or [],
    }


class Kept:
    """The runner's `Claims` of the last simulation, to read the bodies it wrote."""

    last: runner_module.Claims | None = None


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> type[Kept]:
    class Recording(runner_module.Claims):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            Kept.last = self

    monkeypatch.setattr(runner_module, "Claims", Recording)
    return Kept


def sim(docs: list[dict[str, Any]]) -> SimulationResult:
    return simulate(load_text(dump(docs), "in.yaml"), SchedulerConfiguration(), in_tree_registry())


def devices_of(result: SimulationResult) -> dict[str, list[str]]:
    return {p.name: [d.path for d in p.devices] for p in result.pods}


# -------------------------------------------------------------- placement


def test_gang_with_a_claim_per_pod_gets_four_distinct_devices(kept):
    result = sim(cluster() + gpu_gang("g", 4))
    assert result.warnings == []
    assert [(g.name, g.scheduled, g.placed) for g in result.groups] == [("g", True, 4)]
    nodes = sorted(p.node or "" for p in result.pods)
    assert nodes == ["n0", "n0", "n1", "n1"]
    devices = devices_of(result)
    assert all(len(d) == 1 for d in devices.values())
    assert sorted(d[0] for d in devices.values()) == [f"{DRIVER}/{n}/gpu-{i}" for n in ("n0", "n1") for i in (0, 1)]
    for p in result.pods:  # each device is on the pod's own node
        assert p.devices[0].pool == p.node

    table = render_table(result)
    header = table.splitlines()[3]
    assert header.split() == ["POD", "GROUP", "NODE", "DEVICES", "MESSAGE"]
    for p in result.pods:
        assert f"ns/{p.name}   g       {p.node}     {p.devices[0].path}" in table

    doc = json.loads(render_json(result))
    assert [p["devices"] for p in doc["pods"]] == [
        [{"claim": f"{p.name}-gpu", "request": "gpu", "driver": DRIVER, "pool": p.node, "device": p.devices[0].device}]
        for p in result.pods
    ]

    # What PreBind writes came back through the watch: allocation, reservation, finalizer.
    assert kept.last is not None
    body = kept.last.bodies[("ns", "g-0-gpu")]
    assert body["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert body["status"]["reservedFor"] == [{"resource": "pods", "name": "g-0", "uid": "simulate-pod/ns/g-0"}]
    assert body["status"]["allocation"]["devices"]["results"][0]["device"] == result.pods[0].devices[0].device


def test_gang_needing_more_devices_than_exist_is_not_placed():
    result = sim(cluster() + gpu_gang("g", 5))
    (group,) = result.groups
    assert not group.scheduled and group.placed == 0
    assert group.condition is not None and "cannot allocate all claims" in group.condition.message
    assert all(p.node is None and p.devices == () for p in result.pods)
    assert all("cannot allocate all claims" in p.message for p in result.pods)
    doc = json.loads(render_json(result))
    assert all(p["devices"] == [] for p in doc["pods"])
    assert "ns/g-0   g       <none>   -         PodGroup ns/g: needs 5 pods, 4 fit" in render_table(result)


def test_tainted_devices_and_device_taint_rules_are_not_handed_out():
    """n0's gpu-0 is tainted by its slice, n1's pool by a DeviceTaintRule:
    a gang of 2 gets n0's gpu-1 and waits for the second (1 GPU usable)."""
    docs = cluster()
    docs[3]["spec"]["devices"][0]["taints"] = [{"key": "unhealthy", "effect": "NoSchedule"}]
    rule = {
        "apiVersion": RESOURCE,
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain-n1"},
        "spec": {"deviceSelector": {"pool": "n1"}, "taint": {"key": "maintenance", "effect": "NoExecute"}},
    }
    result = sim([*docs, rule, *gpu_gang("one", 1)])
    assert result.warnings == []
    assert devices_of(result) == {"one-0": [f"{DRIVER}/n0/gpu-1"]}
    result = sim([*docs, rule, *gpu_gang("two", 2)])
    assert [(g.name, g.scheduled) for g in result.groups] == [("two", False)]


def test_podgroup_template_entry_makes_one_claim_shared_by_its_pods(kept):
    group = podgroup("g", 3)
    group["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    pods = [gpu_pod(f"g-{i}", "g", template_name="one-gpu") for i in range(3)]
    result = sim(cluster() + [template("one-gpu"), group, *pods])
    assert result.warnings == []
    assert [(g.name, g.scheduled, g.placed) for g in result.groups] == [("g", True, 3)]
    devices = {p.name: p.devices for p in result.pods}
    (first,) = devices["g-0"]
    assert first.claim == "g-gpu"
    assert all(d == (first,) for d in devices.values())  # the same device for every pod
    assert len({p.node for p in result.pods}) == 1  # where the device is

    assert kept.last is not None
    assert [k for k in kept.last.bodies] == [("ns", "g-gpu")]  # one claim, made from the template
    made = kept.last.bodies[("ns", "g-gpu")]
    assert made["metadata"]["annotations"] == {"resource.kubernetes.io/pod-claim-name": "gpu"}
    assert [(o["kind"], o["name"], o["uid"]) for o in made["metadata"]["ownerReferences"]] == [
        ("PodGroup", "g", "simulate-podgroup/ns/g")
    ]
    assert made["spec"] == claim_spec()
    assert made["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.troupe.dev", "resource": "podgroups", "name": "g", "uid": "simulate-podgroup/ns/g"}
    ]
    assert kept.last.groups[GroupKey("ns", "g")]["status"]["resourceClaimStatuses"] == [
        {"name": "gpu", "resourceClaimName": "g-gpu"}
    ]


def test_claim_the_podgroup_lists_by_name_is_reserved_for_the_group(kept):
    group = podgroup("g", 2)
    group["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
    result = sim(cluster() + [claim("shared"), group, gpu_pod("g-0", "g", "shared"), gpu_pod("g-1", "g", "shared")])
    assert result.warnings == []
    assert len({d for p in result.pods for d in p.devices}) == 1
    assert kept.last is not None
    assert [r["resource"] for r in kept.last.bodies[("ns", "shared")]["status"]["reservedFor"]] == ["podgroups"]


def test_victims_release_their_devices():
    # old runs on n0 with the only GPU; urgent (no GPU) preempts it for CPU;
    # then the GPU is free again and next gets it.
    reserved = [{"resource": "pods", "name": "old", "uid": "uid-from-the-cluster"}]
    old = gpu_pod("old", claim_name="old-gpu", cpu="2", nodeName="n0")
    urgent = pod("urgent", cpu="2", priorityClassName="high")
    docs = [node("n0", cpu="3"), device_class(), gpus("n0", 1), priority_class("high", 1000)]
    docs += [claim("old-gpu", allocated("gpu-0", reserved_for=reserved)), claim("next-gpu")]
    docs += [old, urgent, gpu_pod("next", claim_name="next-gpu", cpu="100m")]
    result = sim(docs)
    by_name = {p.name: p for p in result.pods}
    assert by_name["old"].preempted_by == "pod ns/urgent"
    assert by_name["urgent"].node == "n0"
    assert devices_of(result) == {"next": [f"{DRIVER}/n0/gpu-0"], "old": [], "urgent": []}


def test_allocations_in_the_input_are_kept_for_pods_of_the_input():
    # A cluster dumped with kubectl: the reservation names the running pod by
    # its real uid; the simulation's uid replaces it, so the device stays taken.
    running = [{"resource": "pods", "name": "old", "uid": "uid-from-the-cluster"}]
    docs = [node("n0"), device_class(), gpus("n0", 1), claim("old-gpu", allocated("gpu-0", reserved_for=running))]
    docs += [
        claim("new-gpu"),
        gpu_pod("old", claim_name="old-gpu", nodeName="n0"),
        gpu_pod("new", claim_name="new-gpu"),
    ]
    result = sim(docs)
    assert devices_of(result) == {"new": [], "old": [f"{DRIVER}/n0/gpu-0"]}
    assert "cannot allocate all claims" in next(p.message for p in result.pods if p.name == "new")

    # Reserved for a pod that is not in the input: released at the start, as
    # troupe does for pods deleted while it was down.
    gone = [{"resource": "pods", "name": "gone", "uid": "uid-gone"}]
    docs = [node("n0"), device_class(), gpus("n0", 1), claim("old-gpu", allocated("gpu-0", reserved_for=gone))]
    docs += [claim("new-gpu"), gpu_pod("new", claim_name="new-gpu")]
    assert devices_of(sim(docs)) == {"new": [f"{DRIVER}/n0/gpu-0"]}


def test_no_devices_column_without_claims():
    result = sim([node("n0"), pod("p")])
    assert "DEVICES" not in render_table(result)
    assert "devices" not in json.loads(render_json(result))["pods"][0]


# ------------------------------------------------------------ input checks


def bad_slice_without_driver() -> dict[str, Any]:
    body = gpus("n0")
    del body["spec"]["driver"]
    return body


def bad_slice_without_nodes() -> dict[str, Any]:
    body = gpus("n0")
    del body["spec"]["nodeName"]
    return body


def bad_claim() -> dict[str, Any]:
    body = claim("c")
    body["spec"]["devices"]["requests"][0] = {"name": "gpu"}
    return body


def bad_template() -> dict[str, Any]:
    body = template("t")
    body["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 0
    return body


def bad_class() -> dict[str, Any]:
    body = device_class()
    body["spec"]["selectors"] = "device.driver"
    return body


@pytest.mark.parametrize(
    "doc, message",
    [
        (bad_slice_without_driver, "in.yaml: document 2 (ResourceSlice n0-gpus): spec.driver: required"),
        (
            bad_slice_without_nodes,
            "in.yaml: document 2 (ResourceSlice n0-gpus): spec: exactly one of nodeName, nodeSelector, allNodes, "
            "perDeviceNodeSelection is required",
        ),
        (
            bad_claim,
            "in.yaml: document 2 (ResourceClaim ns/c): spec.devices.requests[0]: exactly or firstAvailable is required",
        ),
        (
            bad_template,
            "in.yaml: document 2 (ResourceClaimTemplate ns/t): spec.spec.devices.requests[0].exactly.count: "
            "must be a positive integer",
        ),
        (bad_class, "in.yaml: document 2 (DeviceClass gpu.example.com): spec.selectors: not a list"),
    ],
)
def test_invalid_dra_object_is_an_input_error_naming_it(capsys, tmp_path, doc, message):
    docs = [node("n0"), doc()]
    with pytest.raises(InputError) as exc:
        load_text(dump(docs), "in.yaml")
    assert str(exc.value) == message
    rc, out, err = run(capsys, tmp_path, docs)
    assert (rc, out, err) == (2, "", message + "\n")


def test_references_to_missing_objects_warn():
    group = podgroup("g", 1)
    group["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "absent-template"}]
    wrong_class = claim("odd")
    wrong_class["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "fpga.example.com"
    docs = [node("n0"), device_class(), gpus("n0"), group, wrong_class, template("one-gpu")]
    docs += [gpu_pod("a", "g", template_name="absent-template"), gpu_pod("b", claim_name="absent")]
    docs += [gpu_pod("c", template_name="one-gpu")]
    result = sim(docs)
    assert result.warnings == [
        "in.yaml: document 5 (ResourceClaim ns/odd): warning: requests DeviceClass fpga.example.com, which is not in "
        "the input: no device matches it",
        "in.yaml: document 4 (PodGroup ns/g): warning: spec.resourceClaims[0] names ResourceClaimTemplate "
        "ns/absent-template, which is not in the input: its claim is not made and its pods wait",
        "in.yaml: document 8 (Pod ns/b): warning: spec.resourceClaims[0] names ResourceClaim ns/absent, which is not "
        "in the input: the pod waits for it",
        "in.yaml: document 9 (Pod ns/c): warning: spec.resourceClaims[0] names ResourceClaimTemplate ns/one-gpu: a "
        "claim per pod is made by kube-controller-manager, which the simulation does not run: the pod waits (name a "
        "ResourceClaim, or its PodGroup's entry for the template)",
    ]
    assert all(p.node is None for p in result.pods)
    messages = {p.name: p.message for p in result.pods}
    assert "waiting for the claim gpu of PodGroup ns/g (template absent-template) to be created" in messages["a"]
    assert "waiting for resourceclaim ns/absent to be created" in messages["b"]


# ---------------------------------------------------------------- example


EXAMPLE_TABLE = """\
PODGROUP   POLICY   PODS   PLACED/MIN   CONDITION       PLACEMENT   MESSAGE
ml/eval    gang     2      0/2          Unschedulable   -           needs 2 pods, 1 fit: DynamicResources: cannot allocate all claims: gpu: 0 matching device(s) free, 1 more needed
ml/serve   gang     2      2/2          Scheduled       node-0      2 pod(s) placed in node-0
ml/train   gang     2      2/2          Scheduled       -           2 pod(s) placed

POD          GROUP   NODE     DEVICES                        MESSAGE
ml/eval-0    eval    <none>   -                              PodGroup ml/eval: needs 2 pods, 1 fit: DynamicResources: cannot allocate all claims: gpu: 0 matching device(s) free, 1 more needed
ml/eval-1    eval    <none>   -                              PodGroup ml/eval: needs 2 pods, 1 fit: DynamicResources: cannot allocate all claims: gpu: 0 matching device(s) free, 1 more needed
ml/serve-0   serve   node-0   gpu.example.com/node-0/gpu-1
ml/serve-1   serve   node-0   gpu.example.com/node-0/gpu-1
ml/train-0   train   node-0   gpu.example.com/node-0/gpu-0
ml/train-1   train   node-1   gpu.example.com/node-1/gpu-0

4/6 pending pods placed; PodGroups: 2 Scheduled, 1 Unschedulable.
"""  # noqa: E501


def test_example_simulates_without_warnings(capsys):
    assert main(["simulate", str(EXAMPLE)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out == EXAMPLE_TABLE

    assert main(["simulate", str(EXAMPLE), "--output", "json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    devices = {p["name"]: [(d["claim"], d["device"]) for d in p["devices"]] for p in json.loads(out)["pods"]}
    assert devices["serve-0"] == devices["serve-1"] == [("serve-gpu", "gpu-1")]
    assert devices["eval-0"] == devices["eval-1"] == []

"""DRA device selectors in CEL (scheduler/plugins/dynamicresources/cel.py),
mostly with the examples of the Kubernetes DRA documentation."""

from __future__ import annotations

import pytest

from scheduler.api.dra import Device, Version
from scheduler.api.quantity import parse_quantity
from scheduler.plugins.dynamicresources.cel import SelectorError, compile_selector, device_variable

DEVICE = Device(
    "gpu.example.com",
    "pool-a",
    "gpu-0",
    {
        "gpu.example.com/model": "a100",
        "gpu.example.com/index": 3,
        "gpu.example.com/shared": False,
        "driver.example.com/driverVersion": Version("1.2.3"),
    },
    {"gpu.example.com/memory": parse_quantity("80Gi"), "gpu.example.com/cores": parse_quantity("1500m")},
)


def match(expression: str, device: Device = DEVICE) -> bool:
    return compile_selector(expression).matches(device)


def test_device_variable_groups_by_domain() -> None:
    value = device_variable(DEVICE)
    assert value["driver"] == "gpu.example.com"
    assert value["attributes"]["gpu.example.com"] == {"model": "a100", "index": 3, "shared": False}
    assert set(value["attributes"]["driver.example.com"]) == {"driverVersion"}
    assert set(value["capacity"]["gpu.example.com"]) == {"memory", "cores"}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.driver == "gpu.example.com"', True),
        ('device.driver == "other.example.com"', False),
        ('device.attributes["gpu.example.com"].model == "a100"', True),
        ('device.attributes["gpu.example.com"].model == "h100"', False),
        ('device.attributes["gpu.example.com"].index > 1 && !device.attributes["gpu.example.com"].shared', True),
        ('has(device.attributes["gpu.example.com"].model)', True),
        ('has(device.attributes["gpu.example.com"].family)', False),
        ('"gpu.example.com" in device.attributes', True),
        ('"nic.example.com" in device.attributes', False),
        ('"nic.example.com" in device.attributes && device.attributes["nic.example.com"].speed > 1', False),
    ],
)
def test_attributes(expression: str, expected: bool) -> None:
    assert match(expression) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0', True),
        ('device.capacity["gpu.example.com"].memory.compareTo(quantity("80Gi")) == 0', True),
        ('device.capacity["gpu.example.com"].memory.compareTo(quantity("100Gi")) < 0', True),
        ('device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("10Gi"))', True),
        ('device.capacity["gpu.example.com"].memory.isLessThan(quantity("10Gi"))', False),
        ('device.capacity["gpu.example.com"].memory == quantity("81920Mi")', True),
        ('device.capacity["gpu.example.com"].cores == quantity("1.5")', True),
        ('quantity("1Gi") == quantity("1024Mi")', True),
        ('quantity("1G") == quantity("1Gi")', False),
        ('quantity("100m") == quantity("0.1")', True),
        ('quantity("0") == quantity("-0")', True),
        ('quantity("1Gi") != "1Gi"', True),
        ('isQuantity("40Gi") && !isQuantity("bogus") && !isQuantity("")', True),
    ],
)
def test_quantities(expression: str, expected: bool) -> None:
    assert match(expression) is expected


@pytest.mark.parametrize(
    "expression",
    [
        'quantity("2Ki").asInteger() == 2048',
        'device.capacity["gpu.example.com"].memory.asInteger() == 85899345920',
        'quantity("1Gi").add(quantity("512Mi")) == quantity("1536Mi")',
        'quantity("1Gi").add(1) == quantity("1073741825")',
        'quantity("1").sub(quantity("100m")) == quantity("900m")',
        'quantity("1Gi").sub(2) == quantity("1073741822")',
        'quantity("5").sign() == 1 && quantity("0").sign() == 0 && quantity("1").sub(2).sign() == -1',
        'quantity("3").isInteger() && !quantity("1500m").isInteger()',
        'quantity("1500m").asApproximateFloat() == 1.5',
    ],
)
def test_quantity_functions(expression: str) -> None:
    assert match(expression)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.attributes["driver.example.com"].driverVersion.isGreaterThan(semver("1.0.0"))', True),
        ('device.attributes["driver.example.com"].driverVersion.isLessThan(semver("1.0.0"))', False),
        ('device.attributes["driver.example.com"].driverVersion == semver("1.2.3")', True),
        ('device.attributes["driver.example.com"].driverVersion.compareTo(semver("1.10.0")) < 0', True),
        ('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True),
        ('semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))', True),
        ('semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))', True),
        ('semver("1.0.0-beta.2").isLessThan(semver("1.0.0-beta.11"))', True),
        ('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
        ('semver("1.0.0+build.1").compareTo(semver("1.0.0+build.2")) == 0', True),
        ('semver("2.10.7").major() == 2 && semver("2.10.7").minor() == 10 && semver("2.10.7").patch() == 7', True),
        ('isSemver("1.2.3-rc.1+b5") && !isSemver("1.2") && !isSemver("v1.2.3") && !isSemver("01.2.3")', True),
    ],
)
def test_semver(expression: str, expected: bool) -> None:
    assert match(expression) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('cel.bind(dev, device.attributes["gpu.example.com"], dev.model == "a100" && dev.index > 1)', True),
        ('cel.bind(dev, device.attributes["gpu.example.com"], dev.model == "a100" && dev.index > 5)', False),
        # Nested binds, in the init and in the body.
        ("cel.bind(x, cel.bind(y, 2, y * 3), cel.bind(z, x + 1, x == 6 && z == 7))", True),
        # Commas, brackets and a quoted "cel.bind(" in the body are not argument separators.
        ('cel.bind(s, "a, (b", [s, "cel.bind(, ]"].size() == 2 && s == "a, (b" && {"k": 1}.k == 1)', True),
        ("cel.bind(s, 'it\\'s, ok', s == \"it's, ok\")", True),
        ('cel.bind(m, device.attributes["gpu.example.com"].model, m) == "a100"', True),
    ],
)
def test_bind(expression: str, expected: bool) -> None:
    assert match(expression) is expected


def test_string_mentioning_bind_is_left_alone() -> None:
    assert match('"cel.bind(a, b, c)" == "cel.bind(a, b, c)"')


def test_syntax_error_at_compile() -> None:
    with pytest.raises(SelectorError) as exc:
        compile_selector('device.driver == "gpu.example.com" &&')
    assert str(exc.value).startswith('selector "device.driver == "gpu.example.com" &&": ')


@pytest.mark.parametrize("expression", ["cel.bind(x, 1)", "cel.bind(x + 1, 1, x)", "cel.bind(x, 1, (x)"])
def test_bad_bind_at_compile(expression: str) -> None:
    with pytest.raises(SelectorError, match="selector"):
        compile_selector(expression)


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ('device.attributes["gpu.example.com"].family == "ampere"', "family"),
        ('device.attributes["nic.example.com"].speed > 1', "nic.example.com"),
        ("1 + 1", "not bool"),
        ('device.attributes["gpu.example.com"].model', "not bool"),
        ('quantity("bogus").isInteger()', "bogus"),
        ('semver("1.2").major() == 1', "invalid semver"),
        ('quantity("1Gi").compareTo(semver("1.0.0")) == 0', "cannot compare Quantity with Semver"),
        ('"abc".asInteger() == 1', "expected a Quantity, got string"),
        ('device.attributes["gpu.example.com"].index.isGreaterThan(2)', "expected a Quantity or Semver receiver"),
        ('quantity("1500m").asInteger() == 1', "not an int64 integer"),
        ('quantity("1").add("1") == quantity("2")', "expected a Quantity, got string"),
        ("1 / 0 == 1", "ZeroDivisionError"),
    ],
)
def test_runtime_errors(expression: str, why: str) -> None:
    with pytest.raises(SelectorError) as exc:
        match(expression)
    assert str(exc.value).startswith(f'selector "{expression}": ')
    assert why in str(exc.value)


def test_unparsable_version_attribute_fails_when_used() -> None:
    device = Device("d.example.com", "p", "n", {"d.example.com/v": Version("1.2")}, {})
    assert match('has(device.attributes["d.example.com"].v)', device)
    with pytest.raises(SelectorError, match="invalid semver"):
        match('device.attributes["d.example.com"].v.isGreaterThan(semver("1.0.0"))', device)


def test_compile_is_cached() -> None:
    first = compile_selector('device.driver == "cached.example.com"')
    assert compile_selector('device.driver == "cached.example.com"') is first
    assert first.expression == 'device.driver == "cached.example.com"'

"""gangkeeper's CEL for device selectors held to kube-scheduler's own: hack/celoracle is the selector
compiler of k8s.io/dynamic-resource-allocation/cel, built against the Kubernetes version the tier runs
(hack/cluster/build.sh celoracle). Fixed cases cover each library Kubernetes' environment adds (optional
values, the strings extension's `format`, the URL and format libraries, and the rest), generated ones
(seeded, the seed printed) go where hand-written cases do not: doubles of every magnitude through
`format`, URLs put together from the characters net/url treats specially, names through the formats.

Both must agree on the value, or both fail. What kube-scheduler's compiler refuses is left out: the API
server refuses such a selector when the claim or class is made, so none is ever judged; at most a tenth
of the cases may be such, so the test cannot pass by refusing everything."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
from typing import Any

import pytest
from celpy import celtypes

from tests.realcluster.controlplane import binary, built, versions
from webhook.controller.decide import device_cel

pytestmark = pytest.mark.cluster
SEED = int(os.environ.get("GK_CEL_SEED", random.randrange(1 << 30)))
DRIVER = "gpu.example.com"
DEVICE: dict[str, Any] = {
    "driver": DRIVER,
    "attributes": {
        "model": {"string": "a100"},
        "index": {"int": 3},
        "driverVersion": {"version": "550.1.0"},
        "nvlink": {"bool": True},
        "endpoint": {"string": "https://10.0.0.7:8443/metrics?card=3"},
        "other.example.com/zone": {"string": "rack-1"},
    },
    "capacity": {"memory": {"value": "80Gi"}},
    "shared": False,
}

VALUES = [
    # the strings extension's format (ext/formatting.go), through x/text's en-US printer for %f and %e
    '"%f|%.2f|%e|%.3e|%.0f".format([1234.5, 999.995, 2.71828, 1234.5, 2.5])',
    '"%s|%s|%s|%s|%s|%s".format([64.2, 1e6, 0.00001, 123456.0, 1e21, -0.0])',
    '"%s".format([[1, "a", 2.5, {"b": 1, "a": "x\\n", 2: 3}, null, true, b"ab", 1u, [1e21]]])',
    '"%f|%e|%s|%s".format(["NaN", "-Infinity", double("Infinity"), [double("NaN")]])',
    '"%b|%b|%b|%x|%X|%x|%o|%x".format([5, -5, true, 26, "hé", b"\\x01", -8, -26])',
    '"%.20e|%.8e|%.3f".format([1.0, double("-Infinity"), -0.0001])',
    '"%s|%s".format([[double, list, map, null_type, type, bytes, uint, string], 0.1 + 0.2])',
    '"%s %s".format([{"a": [1, {"k": 2.0}]}, ["é\\u0001\\u00ff\\u200b", "\\U0001F600"]])',
    '"%s".format([{true: 1, false: 2}]) + "%s".format([{1: 1, -1: 2, 10: 3}])',
    # x/text takes a precision as a uint8 (the decimals shown) and an int16 (where it rounds)
    '"%.256f|%.40000f|%.65536f|%.65537f|%.1000001f".format([0.1, 1e22, 2.5, 2.5, 2.5])',
    '"%.1000001e".format([2.5]).size() + "%.65546e".format([2.5]).size()',
    '"%d".format([1.5, 2].slice(0, 1))',  # a list that is not a literal: refused when run, not at create
    '"%s".format([b"\\xff"])',
    '"%s".format([optional.of(1)].slice(0, 1))',
    # conversions as cel-go makes them: "true", Go's %g, RFC 3339 to the nanosecond, seconds
    'string(true) + string(1e6) + string(-0.0) + string(b"ab") + string(2u)',
    'string(timestamp("2023-02-03T23:31:20.120Z")) + string(duration("1h2m3.5s")) + string(duration("-1.25s"))',
    '"%s".format([[timestamp("2023-02-03T23:31:20-05:30"), duration("90s")]])',
    # the URL library (library/urls.go), read as Go's net/url reads it
    'url("https://user:pw@example.com:80/a%20b?x=1&x=2&y#f").getHost()',
    '"%s".format([url("https://e.com/?a=1&b=%zz&c=3;d&&=e&f+g=h+i").getQuery()])',
    'url("https://[fe80::1%25eth0]:80/").getHostname() + url("https://[::1]:80/").getPort()',
    'url("HTTPS://Example.COM/A/../b").getScheme() + url("/p").getScheme() + url("mailto:x@e.com").getEscapedPath()',
    'url("https://e.com/a b").getEscapedPath() + url("https://e.com/%41%2f").getEscapedPath()',
    '[isURL("not a url"), isURL("*"), isURL(""), isURL("relative"), isURL("http://a b")].map(b, string(b)).join()',
    'url("https://example.com:80:90/")',
    'url("ftp://example.com:80:90/").getHost()',
    'url("https://[1.2.3.4]/")',
    'url("https://example.com/a#%zz")',
    # the format library (library/format.go), its messages as apimachinery's validation words them
    'format.dns1123Label().validate("ABC").orValue(["ok"]).join("\\n")',
    'format.qualifiedName().validate("a/b/c").orValue(["ok"]).join("\\n")',
    'format.qualifiedName().validate("/").orValue(["ok"]).join("\\n")',
    'format.qualifiedName().validate("example.com/' + "x" * 64 + '").orValue(["ok"]).join("\\n")',
    'format.uri().validate("x").orValue(["ok"]).join("\\n")',
    'format.dns1123LabelPrefix().validate("ab-").orValue(["ok"]).join("\\n")',
    'format.date().validate("0000-02-29").orValue(["ok"]).join()'
    ' + format.datetime().validate("2020-01-01t23:59:59.1+01:00").orValue(["ok"]).join()',
    'format.named("nope").hasValue() || format.named("uuid").value().validate("0a").hasValue()',
    # optional values (cel.OptionalTypes)
    '{"a": {"b": 2}}.?a.b == optional.of(2) && {"a": {"b": 2}}.?a.c == optional.none()',
    '[?optional.of(1), ?optional.none(), 3] == [1, 3] && {?"a": optional.of(1), ?"b": optional.none()} == {"a": 1}',
    'cel.bind(o, {"a": {"b": 2}}.?a, o.b) == optional.of(2)',
    "optional.of(2).optMap(x, x * 2).value() + optional.none().optMap(x, x * 2).orValue(7)",
    "optional.of(2).optFlatMap(x, optional.none()).hasValue()",
    "[1, 2].first().value() + [].last().orValue(10) + [optional.of(1), optional.none()].unwrapOpt().size()",
    'optional.ofNonZeroValue(0).hasValue() || optional.ofNonZeroValue("").hasValue()'
    " || optional.ofNonZeroValue([]).hasValue()",
    "optional.none().or(optional.of(3)).value()",
    "optional.none().value()",
    "[1, 2][?5].hasValue() || [1, 2][?1] != optional.of(2)",
    "optional.of({'k': 1}).k == optional.of(1)",
    "[{'a': 1}].exists(m, m.b == 1 || true) && [1, 2,].size() == 2",
    "[{'a': 1}].all(m, m.b == 1)",
    # the rest of the environment, as the fake tier checks it (tests/fake/test_devices.py)
    "cel.bind(x, 2, x + 1) + [1, 2, 3].map(x, x > 1, x * 2).sum() + lists.range(3).size()",
    '"a,b,c".split(",", 2).join("|") + strings.quote("x\\ny") + "TacoCÆt".lowerAscii()',
    '{"a": 1}.transformList(k, v, k + string(v)).join()'
    ' + "%s".format([[1, 2, 3].transformMap(i, v, i % 2 == 0, v * v)])',
    "sets.contains([1, 2, 3], [1, 3]) && sets.intersects([1, 2], [2]) && [3, 1, 2].sortBy(x, -x) == [3, 2, 1]",
    'cidr("10.0.0.0/8").containsIP("10.1.2.3") && ip("::1").isLoopback() && !isIP("::ffff:1.2.3.4")',
    'quantity("80Gi").isGreaterThan(quantity("40Gi")) && semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))',
]

SELECTORS = [
    'device.attributes["gpu.example.com"].?model.orValue("none") == "a100"',
    'device.attributes["gpu.example.com"].?missing.orValue("none") == "none"',
    'device.attributes["gpu.example.com"][?"index"].optMap(i, i * 2).orValue(0) == 6',
    'url(device.attributes["gpu.example.com"].endpoint).getPort() == "8443"',
    'url(device.attributes["gpu.example.com"].endpoint).getQuery()["card"] == ["3"]',
    '"%s".format(["gpu.example.com"].map(d, device.attributes[d].model)) == "[\\"a100\\"]"',
    '!format.dns1123Label().validate(device.attributes["other.example.com"].zone).hasValue()',
    'device.attributes["other.example.com"].?zone.hasValue() && !device.attributes["x.example.com"].?zone.hasValue()',
    'has(device.attributes["gpu.example.com"].nvlink) && device.attributes["gpu.example.com"].nvlink',
    'device.attributes["gpu.example.com"].missing == "x"',
    'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) > 0 && !device.allowMultipleAllocations',
    'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("550.0.9"))',
]


def generated(rng: random.Random, count: int) -> list[str]:
    """Expressions where hand-written cases do not go: any double through format, URLs made of what
    net/url treats specially, names of every kind through the named formats."""
    pieces = [*"ab1:/?#%@[]+=&;.-é*\\~!$'( ", "//", "%2", "%25", "%41", "::1", "80", "http", "ftp", "fe80", "1.2.3.4"]
    names = ["a", "B", "1", "-", ".", "/", "_", "x" * 60, "é", "0", "--", "..", "z", "T", ":", "+01:00", "2020-02-29"]
    made: list[str] = []
    while len(made) < count:
        kind = rng.random()
        if kind < 0.3:
            number = rng.choice(
                [
                    rng.uniform(-1e6, 1e6),
                    10 ** rng.uniform(-30, 30) * rng.choice([-1, 1]),
                    struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0],
                    round(rng.uniform(-100, 100), rng.randint(0, 4)),
                ]
            )
            if number != number or abs(number) == float("inf"):
                continue
            text = repr(number) if ("e" in repr(number) or "." in repr(number)) else repr(number) + ".0"
            p = rng.choice([rng.randint(0, 12), rng.randint(0, 70000)])
            made.append(f'"%s|%f|%e|%.{p}f|%.{p}e|%s".format([{text}, {text}, {text}, {text}, {text}, [{text}]])')
        elif kind < 0.65:
            url = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
            if rng.random() < 0.5:
                url = rng.choice(["https://", "http://", "ftp://", "/", "mailto:", "HTTPS://"]) + url
            u = json.dumps(url)
            parts = f"url({u}).getScheme(), url({u}).getHost(), url({u}).getHostname(), url({u}).getPort()"
            made.append(
                f'isURL({u}) ? [{parts}, url({u}).getEscapedPath(), "%s".format([url({u}).getQuery()])].join("|")'
                ' : "not a url"'
            )
        else:
            name = json.dumps("".join(rng.choice(names) for _ in range(rng.randint(0, 8))))
            kind_of = rng.choice(sorted(device_cel.device_cel_formats.VALIDATORS))
            made.append(f'format.{kind_of}().validate({name}).orValue(["ok"]).join("\\n")')
    return made


def oracle(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    path = binary("celoracle", versions()["K8S_DEFAULT"], "celoracle")
    if not built(path):
        pytest.fail(f"{path} was not built: bash hack/cluster/build.sh celoracle")
    given = "".join(json.dumps(line) + "\n" for line in lines)
    answered = subprocess.run([str(path)], input=given, capture_output=True, text=True, timeout=300, check=True)
    return [json.loads(line) for line in answered.stdout.splitlines()]


def ours_value(expression: str) -> dict[str, Any]:
    program = device_cel.compiled(expression)
    try:
        if isinstance(program, Exception):
            raise program
        got = program.evaluate({})
        if isinstance(got, Exception):
            raise got
    except Exception as error:  # every failure is an answer here: compared with kube-scheduler's
        return {"error": f"{type(error).__name__}: {error}"}
    if isinstance(got, celtypes.BoolType | bool):
        return {"value": bool(got)}
    if isinstance(got, int):
        return {"value": int(got)}
    if isinstance(got, str):  # a byte Go holds that is not UTF-8: JSON shows it as U+FFFD
        return {"value": str(got).encode("utf-8", "surrogateescape").decode("utf-8", "replace")}
    return {"value": repr(got)}


def ours_selector(expression: str) -> dict[str, Any]:
    facts = (DEVICE["driver"], DEVICE["attributes"], DEVICE["capacity"], DEVICE["shared"])
    outcome = device_cel.evaluate(expression, facts)
    return {"error": str(outcome)} if isinstance(outcome, Exception) else {"matches": outcome}


def disagreements(cases: list[str], theirs: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[str]:
    differ = []
    for expression, kube, mine in zip(cases, theirs, ours, strict=True):
        if kube.get("compile"):
            continue
        if ("error" in kube) != ("error" in mine) or ("error" not in kube and kube.get("value", kube.get("matches"))
                                                     != mine.get("value", mine.get("matches"))):  # fmt: skip
            differ.append(f"{expression}\n  kube-scheduler: {json.dumps(kube)[:400]}\n  gangkeeper:     {mine}")
    return differ


def test_fixed_cases_evaluate_as_kube_scheduler_evaluates_them() -> None:
    values = oracle([{"expression": e, "value": True} for e in VALUES])
    selectors = oracle([{**DEVICE, "expression": e} for e in SELECTORS])
    assert not [e for e, kube in zip(VALUES + SELECTORS, values + selectors, strict=True) if kube.get("compile")]
    differ = disagreements(VALUES, values, [ours_value(e) for e in VALUES])
    differ += disagreements(SELECTORS, selectors, [ours_selector(e) for e in SELECTORS])
    assert not differ, "\n".join(differ)


def test_generated_cases_evaluate_as_kube_scheduler_evaluates_them() -> None:
    cases = generated(random.Random(SEED), 600)
    theirs = oracle([{"expression": e, "value": True} for e in cases])
    refused = sum(1 for kube in theirs if kube.get("compile"))
    assert refused <= len(cases) // 10, f"seed {SEED}: kube-scheduler refused {refused} of {len(cases)}"
    differ = disagreements(cases, theirs, [ours_value(e) for e in cases])
    assert not differ, f"seed {SEED} (GK_CEL_SEED={SEED} to run it again):\n" + "\n".join(differ[:10])


# selectors of the plain kind real drivers' classes and users' claims write: evaluated on cel-cpp
# (device_cel_fast.py), held here to kube-scheduler's answers as the cel-python path is above
PLAIN = [
    f'device.driver == "{DRIVER}"',
    'device.attributes["gpu.example.com"].model == "a100" && device.attributes["gpu.example.com"].index >= 3',
    'device.attributes["gpu.example.com"].endpoint.matches("^https://10[.]0[.]0[.][0-9]+:8443/")',
    'device.attributes["gpu.example.com"].model.startsWith("a1") && !device.attributes["gpu.example.com"].nvlink',
    'device.attributes["other.example.com"].zone == "rack-1"',
    'has(device.attributes["x.example.com"].zone) || size(device.attributes["gpu.example.com"].model) == 4',
    'device.attributes["x.example.com"].zone == "rack-1"',
    'device.attributes["gpu.example.com"].missing == "x"',
    'device.attributes["gpu.example.com"].index',
    '["a100", "h100"].exists(m, m == device.attributes["gpu.example.com"].model)',
    'device.attributes["gpu.example.com"].index / 0 == 1',
    'int(device.attributes["gpu.example.com"].index) + 9223372036854775807 > 0',
    "device.allowMultipleAllocations == false",
]


def test_plain_selectors_on_cel_cpp_evaluate_as_kube_scheduler_evaluates_them() -> None:
    from webhook.controller.decide import device_cel_fast

    facts = (DEVICE["driver"], DEVICE["attributes"], DEVICE["capacity"], DEVICE["shared"])
    for expression in PLAIN:  # each one really goes to cel-cpp
        fast = device_cel_fast.fast_selector(expression)
        assert fast is not None and device_cel_fast.device_map(fast, facts[0], facts[1], facts[3]), expression
    selectors = oracle([{**DEVICE, "expression": e} for e in PLAIN])
    assert not [e for e, kube in zip(PLAIN, selectors, strict=True) if kube.get("compile")]
    differ = disagreements(PLAIN, selectors, [ours_selector(e) for e in PLAIN])
    assert not differ, "\n".join(differ)

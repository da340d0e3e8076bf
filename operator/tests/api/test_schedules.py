"""spec.autoscaling.schedules: declared windows, validated at apply with errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tailguard.api import InvalidResourceError, parse_inference_service
from tailguard.api.crd import build_crd
from tailguard.cli import main
from tailguard.manifests import load_inference_services
from tg_testing import REPO, manifest


def window(**fields: Any) -> dict[str, Any]:
    return {"name": "weekday-peak", "start": "0 8 * * MON-FRI", "duration": "10h", "minReplicas": 3, **fields}


def autoscaling(*windows: dict[str, Any], max_replicas: int = 8) -> dict[str, Any]:
    return {"autoscaling": {"maxReplicas": max_replicas, "schedules": list(windows)}}


def test_a_window_parses_with_its_defaults() -> None:
    isvc = parse_inference_service(manifest(**autoscaling(window())))
    (parsed,) = isvc.spec.autoscaling.schedules
    assert (parsed.name, parsed.start, parsed.duration, parsed.time_zone, parsed.min_replicas) == (
        "weekday-peak",
        "0 8 * * MON-FRI",
        "10h",
        "UTC",
        3,
    )
    assert parsed.duration_seconds == 36000


def test_no_schedules_by_default() -> None:
    assert parse_inference_service(manifest()).spec.autoscaling.schedules == []


def test_windows_round_trip_in_camel_case() -> None:
    isvc = parse_inference_service(manifest(**autoscaling(window(timeZone="Europe/Berlin"))))
    dumped = isvc.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["spec"]["autoscaling"]["schedules"] == [window(timeZone="Europe/Berlin")]
    assert parse_inference_service(dumped) == isvc


INVALID: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "four cron fields",
        autoscaling(window(start="0 8 * *")),
        [
            "spec.autoscaling.schedules[0].start: expected 5 fields (minute hour day-of-month month "
            "day-of-week), got 4 in '0 8 * *'"
        ],
    ),
    (
        "hour out of range",
        autoscaling(window(start="0 25 * * *")),
        ["spec.autoscaling.schedules[0].start: hour: 25 is outside 0-23"],
    ),
    (
        "unknown weekday",
        autoscaling(window(start="0 8 * * MON-FRY")),
        [
            "spec.autoscaling.schedules[0].start: day of week: 'FRY' is neither a number nor a name such as MON"
        ],
    ),
    (
        "never matches",
        autoscaling(window(start="0 8 31 2 *")),
        ["spec.autoscaling.schedules[0].start: '0 8 31 2 *' never matches: no chosen month has day 31"],
    ),
    (
        "duration in days",
        autoscaling(window(duration="1d")),
        ["spec.autoscaling.schedules[0].duration: '1d' is not a duration such as 2h, 30m or 1h30m"],
    ),
    (
        "duration over a week",
        autoscaling(window(duration="200h")),
        ["spec.autoscaling.schedules[0].duration: '200h' is longer than one week (168h)"],
    ),
    (
        "unknown zone",
        autoscaling(window(timeZone="Europe/Berlim")),
        [
            "spec.autoscaling.schedules[0].timeZone: unknown time zone 'Europe/Berlim' "
            "(an IANA name such as Europe/Berlin)"
        ],
    ),
    (
        "zero replicas",
        autoscaling(window(minReplicas=0)),
        ["spec.autoscaling.schedules[0].minReplicas: Input should be greater than or equal to 1"],
    ),
    (
        "name missing",
        autoscaling({k: v for k, v in window().items() if k != "name"}),
        ["spec.autoscaling.schedules[0].name: Field required"],
    ),
    (
        "duplicate names",
        autoscaling(window(), window(start="0 20 * * *")),
        ["spec.autoscaling.schedules: two windows are named 'weekday-peak'"],
    ),
    (
        "above max replicas",
        autoscaling(window(name="small"), window(name="big", minReplicas=9), max_replicas=8),
        [
            "spec.autoscaling.schedules: autoscaling.schedules[].minReplicas must not exceed autoscaling.maxReplicas"
        ],
    ),
    (
        "too many windows",
        autoscaling(*(window(name=f"w{i}") for i in range(17))),
        ["spec.autoscaling.schedules: List should have at most 16 items after validation, not 17"],
    ),
    (
        "unknown field",
        autoscaling(window(end="18:00")),
        ["spec.autoscaling.schedules[0].end: Extra inputs are not permitted"],
    ),
]


@pytest.mark.parametrize(("spec", "errors"), [(s, e) for _, s, e in INVALID], ids=[i for i, _, _ in INVALID])
def test_invalid_windows_are_named_with_what_is_wrong(spec: dict[str, Any], errors: list[str]) -> None:
    with pytest.raises(InvalidResourceError) as raised:
        parse_inference_service(manifest(**spec))
    assert [str(e) for e in raised.value.errors] == errors


def test_the_crd_keys_windows_by_name_and_checks_their_shape() -> None:
    version = build_crd()["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schedules = spec["properties"]["autoscaling"]["properties"]["schedules"]
    assert schedules["maxItems"] == 16
    assert schedules["x-kubernetes-list-type"] == "map"
    assert schedules["x-kubernetes-list-map-keys"] == ["name"]
    item = schedules["items"]
    assert set(item["required"]) == {"name", "start", "duration", "minReplicas"}
    assert item["properties"]["timeZone"]["default"] == "UTC"
    assert {"pattern", "maxLength"} <= item["properties"]["start"].keys()
    rules = [v["rule"] for v in spec["x-kubernetes-validations"]]
    assert any("schedules.all(w, w.minReplicas <= self.autoscaling.maxReplicas)" in r for r in rules)


def test_render_names_the_bad_window_field_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(manifest(**autoscaling(window(duration="2 hours")))), encoding="utf-8")
    assert main(["render", "-f", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"error: {path}: InferenceService chat: spec.autoscaling.schedules[0].duration: "
        "'2 hours' is not a duration such as 2h, 30m or 1h30m\n"
    )


def test_the_example_declares_overlapping_windows() -> None:
    (isvc,) = load_inference_services(REPO / "examples" / "weekday-peaks.yaml")
    names = [w.name for w in isvc.spec.autoscaling.schedules]
    assert names == ["weekday-peak", "monday-reports"]

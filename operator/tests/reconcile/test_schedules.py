"""Declared schedule windows from the spec to the Deployment: the floor, the status and the event."""

from __future__ import annotations

from typing import Any

from reconcile.test_loop import NOW, Harness, answers, load
from tailguard import policy
from tailguard.api import parse_inference_service
from tailguard.metrics.prometheus import FakePrometheus
from tailguard.reconcile.adapt import policy_config
from tg_testing import manifest

# NOW is Friday 2027-01-15 08:00 UTC.
FRIDAY_PEAK: dict[str, Any] = {
    "name": "friday-peak",
    "start": "0 9 * * FRI",
    "duration": "2h",
    "minReplicas": 4,
}


def test_the_spec_windows_reach_the_policy_as_plain_records() -> None:
    isvc = parse_inference_service(
        manifest(autoscaling={"maxReplicas": 8, "schedules": [{**FRIDAY_PEAK, "timeZone": "Europe/Berlin"}]})
    )
    assert policy_config(isvc, rate_window_s=120.0, burst_window_s=30.0).schedules == (
        policy.ScheduleWindow("friday-peak", "0 9 * * FRI", 7200.0, 4, "Europe/Berlin"),
    )
    assert (
        policy_config(parse_inference_service(manifest()), rate_window_s=120.0, burst_window_s=30.0).schedules
        == ()
    )


def test_an_open_window_scales_a_quiet_service_to_its_floor() -> None:
    harness = Harness(
        FakePrometheus(answers(load("team-a", "chat", rate=2, slow_share=0.0, running=3, waiting=0, pods=1)))
    )
    # 09:00 in Berlin is 08:00 UTC in January: the window has just opened.
    harness.add(autoscaling={"maxReplicas": 8, "schedules": [{**FRIDAY_PEAK, "timeZone": "Europe/Berlin"}]})
    harness.run(NOW)
    assert harness.deployment_replicas() == 4
    decision = harness.status()["lastDecision"]
    assert decision["reason"] == "Scheduled"
    assert decision["limits"] == ["schedule"]
    assert "schedule 'friday-peak' holds ≥ 4" in decision["message"]
    scaled = [note.message for _, note in harness.events if note.reason == "Scaled"]
    assert len(scaled) == 1
    assert scaled[0].startswith("scaled 1→4:")


def test_a_closed_window_holds_nothing() -> None:
    harness = Harness(
        FakePrometheus(answers(load("team-a", "chat", rate=2, slow_share=0.0, running=3, waiting=0, pods=1)))
    )
    # 09:00 UTC has not come yet.
    harness.add(autoscaling={"maxReplicas": 8, "schedules": [FRIDAY_PEAK]})
    harness.run(NOW)
    assert harness.deployment_replicas() == 1
    assert "schedule" not in harness.status()["lastDecision"]["limits"]

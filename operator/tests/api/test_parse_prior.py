"""Parsing a new version of an object with the parse of an earlier one: only what changed is validated."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tailguard.api import InvalidResourceError, parse_inference_service
from tg_testing import manifest


def _versions() -> tuple[dict[str, Any], dict[str, Any]]:
    before = manifest(autoscaling={"maxReplicas": 8})
    before["status"] = {"desiredReplicas": 2}
    after = copy.deepcopy(before)
    after["metadata"]["resourceVersion"] = "12"
    after["metadata"]["annotations"] = {"tailguard.dev/policy-state": "{}"}
    after["status"] = {"desiredReplicas": 3, "ready": "3/3"}
    return before, after


def test_a_status_change_keeps_the_parsed_spec_and_reads_the_rest_as_a_whole_parse_does() -> None:
    before, after = _versions()
    prior = parse_inference_service(before)
    parsed = parse_inference_service(after, prior=(before, prior))
    assert parsed == parse_inference_service(after)
    assert parsed.spec is prior.spec, "the spec was not validated again"
    assert parsed.status.desired_replicas == 3
    assert parsed.metadata.annotations == {"tailguard.dev/policy-state": "{}"}
    assert prior.status.desired_replicas == 2, "the prior parse is left as it was"


def test_a_spec_change_is_parsed_whole() -> None:
    before, after = _versions()
    after["spec"]["autoscaling"] = {"maxReplicas": 4}
    prior = parse_inference_service(before)
    parsed = parse_inference_service(after, prior=(before, prior))
    assert parsed.spec.autoscaling.max_replicas == 4
    assert parsed == parse_inference_service(after)


def test_an_invalid_status_is_reported_as_a_whole_parse_reports_it() -> None:
    before, after = _versions()
    after["status"] = {"desiredReplicas": "many"}
    prior = parse_inference_service(before)
    with pytest.raises(InvalidResourceError) as whole:
        parse_inference_service(after)
    with pytest.raises(InvalidResourceError) as partial:
        parse_inference_service(after, prior=(before, prior))
    assert str(partial.value) == str(whole.value)
    assert "status.desiredReplicas" in str(partial.value)

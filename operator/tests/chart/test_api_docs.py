"""docs/api.md is generated from the models and kept fresh; it documents every field of every model."""

from __future__ import annotations

import re

from tailguard.api import InferenceServiceSpec, InferenceServiceStatus
from tailguard.api.reference import reachable_models, render_reference
from tailguard.api.spec import SPEC_RULES

from .chart_files import REPO

API_DOC = REPO / "docs" / "api.md"


def test_api_reference_is_fresh() -> None:
    assert API_DOC.read_text(encoding="utf-8") == render_reference(), (
        "docs/api.md is stale: run `make api-docs`"
    )


def test_every_field_of_every_model_has_a_row() -> None:
    text = render_reference()
    models = reachable_models(InferenceServiceSpec, InferenceServiceStatus)
    assert {m.__name__ for m in models} >= {
        "ModelSpec",
        "EngineSpec",
        "SLOSpec",
        "MaxBatchSpec",
        "Condition",
        "LastDecision",
    }
    for model in models:
        section = text.split(f"### {model.__name__}\n", 1)[1].split("\n### ", 1)[0]
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in section, f"{model.__name__}.{name} is not documented"
            assert info.description, f"{model.__name__}.{name} has no description"


def test_links_point_at_sections_and_tables_are_rectangular() -> None:
    text = render_reference()
    anchors = {heading.lower() for heading in re.findall(r"^### (\w+)$", text, flags=re.MULTILINE)}
    for target in re.findall(r"\]\(#(\w+)\)", text):
        assert target in anchors, f"broken link #{target}"
    for block in re.findall(r"((?:^\|.*\|\n)+)", text, flags=re.MULTILINE):
        rows = block.strip("\n").split("\n")
        widths = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
        assert len(widths) == 1, f"table with ragged rows:\n{block}"


def test_cross_field_rules_are_listed() -> None:
    text = render_reference()
    for rule in SPEC_RULES:
        assert rule.message in text

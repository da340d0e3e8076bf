"""Reading InferenceService manifests from YAML files, with errors people can act on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tailguard.api import KIND, InferenceService, InvalidResourceError, parse_inference_service


class ManifestError(Exception):
    """A manifest file that cannot be read or does not hold valid InferenceServices."""


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """A YAML parser's error on one line: where (line and column, counted from 1) and what."""
    if isinstance(exc, yaml.MarkedYAMLError):
        what = "; ".join(part for part in (exc.context, exc.problem) if part) or "cannot parse"
        mark = exc.problem_mark or exc.context_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}" if mark is not None else what
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _documents(text: str, source: str) -> Iterator[tuple[int, Any]]:
    try:
        yield from enumerate(d for d in yaml.safe_load_all(text) if d is not None)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source}: not valid YAML: {yaml_error_line(exc)}") from None


def parse_inference_services(text: str, *, source: str) -> list[InferenceService]:
    """Every InferenceService in a (multi-document) YAML text; other kinds are skipped.

    Raises :class:`ManifestError` naming ``source`` (a file name, ``<stdin>``), the document, the
    object and each bad field.
    """
    services: list[InferenceService] = []
    problems: list[str] = []
    for index, doc in _documents(text, source):
        if not isinstance(doc, dict):
            problems.append(f"{source}: document {index + 1}: expected a mapping, found {type(doc).__name__}")
            continue
        if doc.get("kind") != KIND:
            continue
        name = (doc.get("metadata") or {}).get("name", f"document {index + 1}")
        try:
            services.append(parse_inference_service(doc))
        except InvalidResourceError as exc:
            problems.extend(f"{source}: {KIND} {name}: {error}" for error in exc.errors)
    if problems:
        raise ManifestError("\n".join(problems))
    if not services:
        raise ManifestError(f"{source}: no {KIND} found")
    return services


def load_inference_services(path: Path) -> list[InferenceService]:
    """Every InferenceService in a YAML file (see :func:`parse_inference_services`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_inference_services(text, source=str(path))


class _NoAliasDumper(yaml.SafeDumper):
    """Writes repeated sub-objects out in full: anchors confuse people reading manifests."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(objects: list[Any]) -> str:
    """Objects as a multi-document YAML stream, keys in the order given."""
    return yaml.dump_all(objects, Dumper=_NoAliasDumper, sort_keys=False, explicit_start=True)

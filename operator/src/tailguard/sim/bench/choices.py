"""Options the side benchmarks share: which of their named runs to make, and how many processes."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def chosen(parser: argparse.ArgumentParser, text: str, known: Sequence[str], noun: str) -> list[str]:
    """The comma-separated names of ``text``; an unknown one ends the program in one line."""
    keys = [k for k in text.split(",") if k]
    unknown = sorted(set(keys) - set(known))
    if unknown:
        parser.error(f"unknown {noun} {', '.join(unknown)}; known: {', '.join(known)}")
    return keys


def check_jobs(parser: argparse.ArgumentParser, jobs: int) -> None:
    """At least one process, or the program ends in one line."""
    if jobs < 1:
        parser.error("--jobs must be at least 1")

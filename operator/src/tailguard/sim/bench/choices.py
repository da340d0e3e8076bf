"""Options the benchmarks share: which of their named runs to make, the seeds, how many
processes and where to write; each bad one ends the program in one line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path


def chosen(parser: argparse.ArgumentParser, text: str, known: Sequence[str], noun: str) -> list[str]:
    """The comma-separated names of ``text``; an unknown one ends the program in one line."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    unknown = sorted(set(keys) - set(known))
    if unknown:
        parser.error(f"unknown {noun} {', '.join(unknown)}; known: {', '.join(known)}")
    return keys


def check_jobs(parser: argparse.ArgumentParser, jobs: int) -> None:
    """At least one process, or the program ends in one line."""
    if jobs < 1:
        parser.error("--jobs must be at least 1")


def seeds(parser: argparse.ArgumentParser, text: str) -> list[int]:
    """The comma-separated seeds of ``text``: integers, at least one."""
    try:
        found = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {text!r}")
    if not found:
        parser.error("--seeds names no seed")
    return found


def directory(parser: argparse.ArgumentParser, path: str, option: str) -> Path:
    """``path`` made a directory now, before any run (a bad one ends the program in one line)."""
    target = Path(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"{option} {path}: cannot create the directory: {exc.strerror or exc}")
    return target

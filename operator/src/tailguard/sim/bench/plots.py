"""The benchmark's figures: the informed policy's frontier under jumps, and every policy's swept
frontier against the flat fleet and the lower bound."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tailguard.sim.bench.sweep import SweepPoint, pareto


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_informed(key: str, rows: dict[str, dict[str, list[float]]], goodput: float, path: Path) -> Path:
    """Attainment against GPU-hours: the informed policy by floor, tailguard's settings, baselines."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    informed = [
        (np.mean(v["gpu_hours"]), np.mean(v["attainment"]))
        for k, v in rows.items()
        if k.startswith("informed")
    ]
    ax.plot(
        [x for x, _ in informed],
        [y for _, y in informed],
        "o-",
        color="grey",
        label="informed (ideal reactive), by floor",
    )
    for name, values in rows.items():
        if name.startswith("informed"):
            continue
        marker = "s" if name.startswith("tailguard") else "^"
        ax.plot(np.mean(values["gpu_hours"]), np.mean(values["attainment"]), marker, ms=8, label=name)
    ax.axhline(goodput, color="red", ls="--", lw=1, label=f"target {goodput}")
    ax.set_xlabel("GPU-hours (mean over seeds)")
    ax.set_ylabel("attainment (mean over seeds)")
    ax.set_title(f"{key}: attainment against GPU-hours")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_sweep(
    key: str,
    points: Sequence[SweepPoint],
    *,
    goodput: float,
    flat: tuple[float, float] | None,
    bound_gpu_hours: float,
    path: Path,
) -> Path:
    """Each policy's swept points and its frontier; the flat fleet and the lower bound as marks."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for policy in dict.fromkeys(p.policy for p in points):
        mine = [p for p in points if p.policy == policy]
        front = pareto(mine)
        style: dict[str, Any] = dict(lw=2.5, color="black") if policy == "tailguard" else dict(lw=1)
        (line,) = ax.plot(
            [p.summary.gpu_hours for p in front],
            [p.summary.attainment for p in front],
            "o-",
            label=policy,
            **style,
        )
        others = [p for p in mine if p not in front]
        ax.plot(
            [p.summary.gpu_hours for p in others],
            [p.summary.attainment for p in others],
            "o",
            mfc="none",
            color=line.get_color(),
        )
    if flat is not None:
        ax.plot([flat[0]], [flat[1]], "*", ms=14, color="tab:red", label="hindsight flat fleet")
    ax.axvline(bound_gpu_hours, color="grey", ls=":", lw=1, label="lower bound")
    ax.axhline(goodput, color="red", ls="--", lw=1, label=f"target {goodput}")
    ax.set_xscale("log")
    ax.set_xlabel("GPU-hours (log)")
    ax.set_ylabel("attainment")
    low = min([p.summary.attainment for p in points] + [goodput])
    ax.set_ylim(max(0.0, low - 0.02), 1.002)
    ax.set_title(f"{key}: each policy swept over its knob")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

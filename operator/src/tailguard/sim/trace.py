"""Request traces: arrival time, prompt tokens and output tokens per request.

Three file formats are read (CSV or JSONL, told apart by their columns or keys):

* native: ``arrival_s, input_tokens, output_tokens`` (seconds from the start of the trace);
* the Azure LLM inference trace: ``TIMESTAMP, ContextTokens, GeneratedTokens`` with date-time stamps;
* Mooncake: JSONL with ``timestamp`` in milliseconds, ``input_length`` and ``output_length``.

Arrivals are shifted so the trace starts at zero. ``scaled(k)`` compresses time by ``k`` (``k`` times
the request rate), ``window(start, end)`` cuts a slice and restarts its clock at zero.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class TraceError(ValueError):
    """A trace file that cannot be read, with the line and what was wrong."""


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival; arrays of equal length.

    ``before`` holds requests of the same process that arrived before the trace (at negative
    times): a synthetic trace drawn with a lead-in, or the part of a file before a ``window``.
    ``lead_in`` serves them first; without them it replays the trace's own start.
    """

    name: str
    arrival_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray
    before: Trace | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if len(self.input_tokens) != n or len(self.output_tokens) != n:
            raise TraceError("arrival, input and output columns differ in length")

    @staticmethod
    def from_columns(
        name: str, arrival_s: Iterable[float], input_tokens: Iterable[int], output_tokens: Iterable[int]
    ) -> Trace:
        """A trace from columns in any order: sorted by arrival, shifted to start at zero."""
        arrival = np.asarray(list(arrival_s), dtype=np.float64)
        inputs = np.maximum(1, np.asarray(list(input_tokens), dtype=np.int64))
        outputs = np.maximum(1, np.asarray(list(output_tokens), dtype=np.int64))
        if len(arrival) != len(inputs) or len(arrival) != len(outputs):
            raise TraceError("arrival, input and output columns differ in length")
        if len(arrival) and not np.all(np.isfinite(arrival)):
            raise TraceError("arrival times must be finite")
        order = np.argsort(arrival, kind="stable")
        arrival = arrival[order]
        if len(arrival):
            arrival = arrival - arrival[0]
        return Trace(name, arrival, inputs[order], outputs[order])

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1]) if len(self) else 0.0

    @property
    def mean_rate(self) -> float:
        return len(self) / self.duration_s if self.duration_s > 0 else 0.0

    def longer_than(self, max_model_len: int) -> int:
        """Requests whose prompt and output exceed ``max_model_len`` tokens: vLLM rejects them
        with a 400 before they reach the engine, so no fleet serves them."""
        return int(np.sum(self.input_tokens + self.output_tokens > max_model_len))

    def scaled(self, k: float) -> Trace:
        """Time compressed by ``k``: the same requests at ``k`` times the rate."""
        if not k > 0 or not math.isfinite(k):
            raise TraceError(f"rate scale must be a positive number, got {k}")
        before = self.before.scaled(k) if self.before is not None else None
        return Trace(f"{self.name}×{k:g}", self.arrival_s / k, self.input_tokens, self.output_tokens, before)

    def _joined(self) -> Trace:
        """The requests before the trace and the trace's own, on one clock."""
        if self.before is None or not len(self.before):
            return self
        return Trace(
            self.name,
            np.concatenate([self.before.arrival_s, self.arrival_s]),
            np.concatenate([self.before.input_tokens, self.input_tokens]),
            np.concatenate([self.before.output_tokens, self.output_tokens]),
        )

    def window(self, start_s: float, end_s: float | None = None) -> Trace:
        """Requests arriving in ``[start_s, end_s)``, with the clock restarted at ``start_s``; what
        arrived before ``start_s`` becomes the slice's ``before``."""
        end = math.inf if end_s is None else end_s
        whole = self._joined()
        mask = (whole.arrival_s >= start_s) & (whole.arrival_s < end)
        earlier = whole.arrival_s < start_s
        before = Trace(
            f"{self.name} before",
            whole.arrival_s[earlier] - start_s,
            whole.input_tokens[earlier],
            whole.output_tokens[earlier],
        )
        return Trace(
            f"{self.name}[{start_s:g}:{'' if end_s is None else f'{end_s:g}'}]",
            whole.arrival_s[mask] - start_s,
            whole.input_tokens[mask],
            whole.output_tokens[mask],
            before if len(before) else None,
        )

    def lead_in(self, seconds: float) -> Trace:
        """``seconds`` of load at ``[-seconds, 0)`` that warms a fleet before the trace begins: the
        requests of the same process that came before it (``before``) when it has them for the
        whole span, otherwise the trace's first ``seconds`` played again."""
        before = self.before
        if before is not None and len(before) and float(before.arrival_s[0]) <= -seconds + 60.0:
            keep = before.arrival_s >= -seconds
            return Trace(
                f"{self.name} lead-in",
                before.arrival_s[keep],
                before.input_tokens[keep],
                before.output_tokens[keep],
            )
        head = Trace(self.name, self.arrival_s, self.input_tokens, self.output_tokens).window(0.0, seconds)
        return Trace(f"{self.name} lead-in", head.arrival_s - seconds, head.input_tokens, head.output_tokens)

    def arrival_rate(self, bin_s: float, end_s: float | None = None) -> FloatArray:
        """Requests per second in consecutive bins of ``bin_s`` seconds."""
        end = self.duration_s if end_s is None else end_s
        bins = max(1, math.ceil(end / bin_s))
        counts = np.bincount(np.minimum((self.arrival_s // bin_s).astype(np.int64), bins - 1), minlength=bins)
        return counts.astype(np.float64) / bin_s


# -- reading files ---------------------------------------------------------------------------

_NATIVE = ("arrival_s", "input_tokens", "output_tokens")
_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_MOONCAKE = ("timestamp", "input_length", "output_length")


def _parse_time(raw: object) -> float:
    """Seconds from a number or an ISO-like date-time (Azure's ``2023-11-16 18:15:46.6805900``)."""
    if isinstance(raw, int | float):
        return float(raw)
    text = str(raw).strip()
    try:
        return float(text)
    except ValueError:
        pass
    # Python's parser takes at most six fractional digits; Azure writes seven.
    head, dot, frac = text.partition(".")
    if dot:
        digits = "".join(ch for ch in frac if ch.isdigit())
        tail = frac[len(digits) :]
        text = f"{head}.{digits[:6]}{tail}"
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise TraceError(f"cannot read time {raw!r}") from exc
    return stamp.timestamp()


def _records(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    with path.open(encoding="utf-8") as fh:
        first = ""
        while not first.strip():
            pos = fh.tell()
            first = fh.readline()
            if not first:
                return
        fh.seek(pos)
        if first.lstrip().startswith("{"):
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceError(f"{path}:{lineno}: not JSON: {exc.msg}") from exc
                if not isinstance(record, dict):
                    raise TraceError(f"{path}:{lineno}: expected an object")
                yield lineno, record
        else:
            reader = csv.DictReader(fh)
            for lineno, row in enumerate(reader, start=2):
                yield lineno, {k.strip(): v for k, v in row.items() if k is not None}


def load_trace(path: str | Path) -> Trace:
    """Read a native, Azure or Mooncake trace (CSV or JSONL); the format is told by its columns."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    arrivals: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    columns: tuple[str, str, str] | None = None
    scale = 1.0
    for lineno, record in _records(path):
        if columns is None:
            for candidate, unit in ((_NATIVE, 1.0), (_AZURE, 1.0), (_MOONCAKE, 1e-3)):
                if all(c in record for c in candidate):
                    columns, scale = candidate, unit
                    break
            else:
                raise TraceError(
                    f"{path}:{lineno}: unknown columns {sorted(record)}; expected one of "
                    f"{list(_NATIVE)}, {list(_AZURE)} or {list(_MOONCAKE)}"
                )
        t_col, in_col, out_col = columns
        try:
            arrivals.append(_parse_time(record[t_col]) * scale)
            inputs.append(int(float(str(record[in_col]))))
            outputs.append(int(float(str(record[out_col]))))
        except (KeyError, ValueError, TypeError) as exc:
            raise TraceError(f"{path}:{lineno}: {exc}") from exc
    if not arrivals:
        raise TraceError(f"{path}: no requests")
    return Trace.from_columns(path.stem, arrivals, inputs, outputs)


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` in the native CSV format."""
    with Path(path).open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(_NATIVE)
        for t, i, o in zip(trace.arrival_s, trace.input_tokens, trace.output_tokens, strict=True):
            writer.writerow((f"{t:.6f}", int(i), int(o)))

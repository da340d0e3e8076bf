"""The Prometheus reader: a small protocol, an async HTTP implementation and a fake for tests.

httpx's async client is used rather than prometheus-api-client: it never blocks kopf's event loop
(no worker threads), keeps one pooled connection, applies a timeout to every request, and ships a
mock transport for tests. prometheus-api-client is synchronous and pulls in pandas.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson

from tailguard.contract.histogram import histogram_quantile
from tailguard.metrics.results import QueryError

Vector = Sequence[Mapping[str, Any]]


class PrometheusSource(Protocol):
    """Anything that answers an instant PromQL query with a vector."""

    async def query(self, promql: str, *, at: float | None = None) -> Vector:
        """The instant-vector result of ``promql``; raises :class:`QueryError` on any failure."""
        ...


@dataclass(frozen=True)
class PrometheusSettings:
    """How to reach Prometheus."""

    url: str
    bearer_token: str | None = None
    basic_auth: tuple[str, str] | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    timeout_s: float = 10.0


class HttpPrometheus:
    """:class:`PrometheusSource` over Prometheus's HTTP API (``/api/v1/query``)."""

    def __init__(
        self, settings: PrometheusSettings, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        headers = {"Authorization": f"Bearer {settings.bearer_token}"} if settings.bearer_token else {}
        verify: ssl.SSLContext | bool = True
        if settings.insecure_skip_verify:
            verify = False
        elif settings.ca_file:
            verify = ssl.create_default_context(cafile=settings.ca_file)
        self._timeout_s = settings.timeout_s
        self._client = httpx.AsyncClient(
            base_url=settings.url.rstrip("/"),
            headers=headers,
            auth=settings.basic_auth,
            verify=verify,
            timeout=settings.timeout_s,
            transport=transport,
        )

    async def query(self, promql: str, *, at: float | None = None) -> Vector:
        params: dict[str, str] = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        response = await self._post(params)
        try:
            # orjson: a cycle decodes every service's series, and the standard library's decoder
            # was about a tenth of the operator's CPU at 500 services.
            body = orjson.loads(response.content)
        except ValueError:
            raise QueryError(f"Prometheus answered HTTP {response.status_code} without JSON") from None
        if not isinstance(body, dict):
            raise QueryError(f"Prometheus answered HTTP {response.status_code} with JSON that is no object")
        if response.status_code != 200 or body.get("status") != "success":
            raise QueryError(f"Prometheus error (HTTP {response.status_code}): {body.get('error', body)}")
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise QueryError(f"expected a vector, got {data.get('resultType')!r}")
        result: Vector = data.get("result") or []
        return result

    async def _post(self, params: dict[str, str]) -> httpx.Response:
        """POST one query; a connection dropped before the answer (a proxy's full backlog, a pooled
        connection the server closed) is tried once more at once: a query only reads, and one
        lost connection would otherwise fail the whole reading and put every due decision off."""
        try:
            try:
                return await self._client.post("/api/v1/query", data=params)
            except (httpx.NetworkError, httpx.RemoteProtocolError):
                return await self._client.post("/api/v1/query", data=params)
        except httpx.TimeoutException:
            raise QueryError(
                f"Prometheus did not answer within {self._timeout_s:g} s (--prometheus-timeout)"
            ) from None
        except httpx.HTTPError as exc:
            raise QueryError(f"Prometheus unreachable: {type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


_NARROWED = re.compile(r', le=~"((?:[^"\\]|\\.)*)"')
_P99 = re.compile(r"^histogram_quantile\(0\.99, (.*)\)$")


class FakePrometheus:
    """A :class:`PrometheusSource` answering from a table: query text → vector (or an error).

    A bucket query narrowed to some ``le`` values, or the ``histogram_quantile`` of one, that is not
    in the table is answered from the full bucket query's entry as Prometheus would (the buckets
    with those bounds; the p99 of each series group), so a table of full readings serves both.
    """

    def __init__(self, answers: Mapping[str, Vector | Exception] | None = None) -> None:
        self.answers: dict[str, Vector | Exception] = dict(answers or {})
        self.queries: list[str] = []

    async def query(self, promql: str, *, at: float | None = None) -> Vector:
        self.queries.append(promql)
        return self.answer(promql)

    def answer(self, promql: str) -> Vector:
        """The vector for ``promql`` (not recorded as a query); raises an entry that is an error."""
        answer = self.answers.get(promql)
        if answer is None:
            return self._derived(promql)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def _derived(self, promql: str) -> Vector:
        p99 = _P99.match(promql)
        if p99 is not None:
            return _quantiles(self.answer(p99.group(1)), 0.99)
        narrowed = _NARROWED.search(promql)
        if narrowed is None:
            return []
        # A PromQL string of regex-escaped bounds: without its backslashes, the bounds themselves.
        texts = set(narrowed.group(1).replace("\\", "").split("|"))
        full = self.answer(promql[: narrowed.start()] + promql[narrowed.end() :])
        return [series for series in full if (series.get("metric") or {}).get("le") in texts]


def _quantiles(buckets: Vector, q: float) -> Vector:
    """``histogram_quantile(q, buckets)``: one series per label set without ``le``."""
    groups: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    for series in buckets:
        labels = dict(series.get("metric") or {})
        le = labels.pop("le", None)
        if le is None:
            continue
        value = series.get("value") or (0.0, "NaN")
        groups.setdefault(tuple(sorted(labels.items())), []).append((float(le), float(value[1])))
    out: list[Mapping[str, Any]] = []
    for labels_key, pairs in groups.items():
        try:
            value = histogram_quantile(q, pairs)
        except ValueError:  # no +Inf bucket: Prometheus answers nothing for it
            continue
        out.append({"metric": dict(labels_key), "value": [0.0, repr(value)]})
    return out

"""The operator's own list-and-watch, against a scripted API server (httpx's mock transport)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from tailguard.k8s.watch import RETRY_PAUSES_S, ApiEndpoint, ListWatch, resource_path

PATH = "/apis/tailguard.dev/v1alpha1/inferenceservices"


def _obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "resourceVersion": rv}}


def _lines(*events: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(e) + b"\n" for e in events)


class _Sink:
    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def listed(self, objects: list[dict[str, Any]]) -> None:
        self.seen.append(("listed", *(o["metadata"]["name"] for o in objects)))
        assert all(o["kind"] == "InferenceService" for o in objects), "list items get their kind"

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        self.seen.append((event_type, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))


Answer = Callable[[httpx.Request], httpx.Response]


async def _run(
    script: list[Answer], *, sink: _Sink | None = None, tls_server_name: str | None = None
) -> tuple[_Sink, list[httpx.Request], list[float]]:
    """Run a watch until the script is spent; the requests it made and the pauses it took."""
    requests: list[httpx.Request] = []
    spent = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if len(requests) > len(script):
            spent.set()
            await asyncio.Event().wait()  # hang like an idle watch until cancelled
        return script[len(requests) - 1](request)

    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    client = httpx.AsyncClient(base_url="https://api.test", transport=httpx.MockTransport(handler))
    endpoint = ApiEndpoint(
        client=client, headers=lambda: {"Authorization": "Bearer t0ken"}, tls_server_name=tls_server_name
    )
    sink = sink or _Sink()
    watch = ListWatch(
        endpoint, PATH, sink, api_version="tailguard.dev/v1alpha1", kind="InferenceService", sleep=sleep
    )
    task = asyncio.create_task(watch.run())
    await asyncio.wait_for(spent.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await client.aclose()
    return sink, requests, pauses


def _list(*names: str, rv: str = "10", cont: str | None = None) -> Answer:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    body = {"kind": "InferenceServiceList", "metadata": meta, "items": [_obj(n, "5") for n in names]}
    return lambda request: httpx.Response(200, content=orjson.dumps(body))


def _watch(*events: dict[str, Any], status: int = 200) -> Answer:
    return lambda request: httpx.Response(status, content=_lines(*events))


async def test_lists_in_pages_then_watches_from_the_lists_version_and_resumes_where_it_ended() -> None:
    sink, requests, pauses = await _run(
        [
            _list("a", cont="page-2"),
            _list("b", rv="10"),
            _watch(
                {"type": "ADDED", "object": _obj("c", "11")},
                {"type": "MODIFIED", "object": _obj("a", "12")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            ),
            _watch({"type": "DELETED", "object": _obj("b", "16")}),
        ]
    )
    assert sink.seen == [
        ("listed", "a", "b"),
        ("ADDED", "c", "11"),
        ("MODIFIED", "a", "12"),
        ("DELETED", "b", "16"),
    ]
    assert requests[1].url.params["continue"] == "page-2"
    watches = [r.url.params for r in requests[2:]]
    assert [w["resourceVersion"] for w in watches] == ["10", "15", "16"]
    assert all(w["watch"] == "true" and w["allowWatchBookmarks"] == "true" for w in watches)
    assert all(r.headers["Authorization"] == "Bearer t0ken" for r in requests)
    assert pauses == []


async def test_an_expired_version_lists_again_whether_as_an_event_or_a_status() -> None:
    sink, requests, pauses = await _run(
        [
            _list("a"),
            _watch({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}),
            _list("a", "b", rv="20"),
            _watch(status=410),
            _list("b", rv="30"),
        ]
    )
    assert sink.seen == [("listed", "a"), ("listed", "a", "b"), ("listed", "b")]
    assert "watch" not in requests[2].url.params
    assert "watch" not in requests[4].url.params
    assert requests[5].url.params["resourceVersion"] == "30"
    assert pauses == []


async def test_failures_pause_longer_each_time_then_start_over() -> None:
    refused = lambda request: httpx.Response(403, text="forbidden: cannot list\ndetail")  # noqa: E731
    sink, _requests, pauses = await _run([refused] * 6 + [_list("a")])
    assert pauses == [*RETRY_PAUSES_S, RETRY_PAUSES_S[-1]]
    assert sink.seen == [("listed", "a")]


async def test_a_broken_stream_or_a_bad_line_resumes_after_a_pause() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("peer closed connection", request=request)

    def garbled(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"{not json\n")

    sink, _requests, pauses = await _run([_list("a"), broken, _list("a"), garbled])
    assert pauses == [RETRY_PAUSES_S[0], RETRY_PAUSES_S[0]]
    assert sink.seen == [("listed", "a"), ("listed", "a")]


async def test_a_failing_sink_is_logged_and_the_watch_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    class Failing(_Sink):
        def changed(self, event_type: str, obj: dict[str, Any]) -> None:
            super().changed(event_type, obj)
            raise KeyError("bug")

    script = [
        _list("a"),
        _watch({"type": "ADDED", "object": _obj("b", "11")}, {"type": "ADDED", "object": _obj("c", "12")}),
    ]
    sink, requests, _ = await _run(script, sink=Failing())
    assert [s[:2] for s in sink.seen] == [("listed", "a"), ("ADDED", "b"), ("ADDED", "c")]
    assert requests[2].url.params["resourceVersion"] == "12"
    assert "handling a change" in caplog.text


def test_resource_paths() -> None:
    assert resource_path("tailguard.dev", "v1alpha1", "inferenceservices", None) == PATH
    assert (
        resource_path("tailguard.dev", "v1alpha1", "inferenceservices", "team-a")
        == "/apis/tailguard.dev/v1alpha1/namespaces/team-a/inferenceservices"
    )
    assert resource_path("", "v1", "pods", "x") == "/api/v1/namespaces/x/pods"


class _Configuration:
    """The fields of the official client's configuration the endpoint reads."""

    host = "https://10.0.0.1:6443"
    verify_ssl = False
    ssl_ca_cert = None
    assert_hostname = None
    cert_file = None
    key_file = None
    proxy = None

    def __init__(self) -> None:
        self.tokens = iter(["Bearer one", "Bearer two"])

    def auth_settings(self) -> dict[str, dict[str, str]]:
        token = next(self.tokens)
        return {"BearerToken": {"type": "api_key", "in": "header", "key": "authorization", "value": token}}


async def test_the_endpoint_from_the_clients_configuration_asks_for_the_token_each_time() -> None:
    endpoint = ApiEndpoint.from_client_configuration(_Configuration())
    try:
        assert str(endpoint.client.base_url) == "https://10.0.0.1:6443"
        assert endpoint.headers() == {"authorization": "Bearer one"}
        assert endpoint.headers() == {"authorization": "Bearer two"}, "a rotated token is picked up"
    finally:
        await endpoint.client.aclose()


async def test_the_endpoint_authenticates_as_the_official_client_would_with_a_loaded_token() -> None:
    from kubernetes import client

    configuration = client.Configuration(host="https://10.0.0.1:6443")
    configuration.verify_ssl = False
    configuration.api_key["BearerToken"] = "Bearer from-kubeconfig"  # where the config loaders put it
    endpoint = ApiEndpoint.from_client_configuration(configuration)
    try:
        assert endpoint.headers() == {"authorization": "Bearer from-kubeconfig"}
    finally:
        await endpoint.client.aclose()


async def test_events_split_across_chunks_are_put_back_together() -> None:
    events = _lines(
        {"type": "ADDED", "object": _obj("c", "11")},
        {"type": "MODIFIED", "object": _obj("a", "12")},
    ).rstrip(b"\n")  # the last line without its newline, as a stream cut at the end may leave it
    cuts = [0, 7, 8, 60, len(events) - 3, len(events)]

    async def chunks() -> Any:
        for start, end in itertools.pairwise(cuts):
            yield events[start:end]

    sink, _, pauses = await _run([_list(), lambda request: httpx.Response(200, content=chunks())])
    assert sink.seen == [("listed",), ("ADDED", "c", "11"), ("MODIFIED", "a", "12")]
    assert pauses == []


async def test_a_tls_server_name_goes_with_every_request_as_the_official_client_sends_it() -> None:
    from kubernetes import client

    configuration = client.Configuration(host="https://10.0.0.1:6443")
    configuration.verify_ssl = False
    configuration.tls_server_name = "api.internal.example"
    from_config = ApiEndpoint.from_client_configuration(configuration)
    try:
        assert from_config.extensions() == {"sni_hostname": "api.internal.example"}
    finally:
        await from_config.client.aclose()

    answers = [_list(), _watch(status=410), _list()]
    _, requests, _ = await _run(answers, tls_server_name="api.internal.example")
    named = [request.extensions.get("sni_hostname") for request in requests]
    assert named == ["api.internal.example"] * 4, "the lists and the watch all name the server"
    assert ApiEndpoint(client=from_config.client).extensions() == {}

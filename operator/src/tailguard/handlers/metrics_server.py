"""The operator's ``/metrics`` endpoint: a small threaded HTTP server around :meth:`Telemetry.exposition`."""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import ThreadingWSGIServer

from tailguard.reconcile.telemetry import Telemetry

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def metrics_app(telemetry: Telemetry) -> WSGIApp:
    """A WSGI app answering every GET with the metrics (as prometheus_client's does: any path,
    content negotiated from ``Accept``, gzip when accepted)."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "GET":
            start_response("405 Method Not Allowed", [("Allow", "GET")])
            return [b""]
        body, content_type = telemetry.exposition(environ.get("HTTP_ACCEPT"))
        headers = [("Content-Type", content_type)]
        if "gzip" in (environ.get("HTTP_ACCEPT_ENCODING") or ""):
            body = gzip.compress(body, compresslevel=6)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    return app


class _QuietHandler(WSGIRequestHandler):
    """No access log: Prometheus scrapes every few seconds."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_metrics(telemetry: Telemetry, port: int, address: str) -> WSGIServer:
    """Serve the metrics on ``address:port`` from a daemon thread; returns the server (its
    ``server_port`` is the port bound, for ``port`` 0)."""
    family = socket.getaddrinfo(address or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(ThreadingWSGIServer):
        address_family = family

    server = make_server(address, port, metrics_app(telemetry), Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server

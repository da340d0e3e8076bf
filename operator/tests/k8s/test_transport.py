"""The writers' kept-alive connections against a local HTTP/1.1 server (loopback only)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from tailguard.k8s.transport import KeptAliveConnections, proxy_for, tls_context


class Server:
    """Answers every request with the path it got; counts connections; can hang up after answering."""

    def __init__(self) -> None:
        self.connections = 0
        self.paths: list[str] = []
        self.hang_up_after_answer = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                server.connections += 1

            def do_PATCH(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                server.paths.append(self.path)
                status = 404 if self.path.endswith("/absent") else 200
                answer = b'{"path": "' + self.path.encode() + b'", "body": ' + body + b"}"
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                if server.hang_up_after_answer:
                    self.close_connection = True  # without saying so: the client finds out later

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Server:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    with Server() as running:
        yield running


def test_requests_share_one_connection_per_thread(server: Server) -> None:
    connections = KeptAliveConnections(server.url, None)
    answers = [connections.request("PATCH", f"/apis/x/{i}", b"{}", {"X": "1"}) for i in range(5)]
    assert [status for status, _, _ in answers] == [200] * 5
    assert answers[2][2] == b'{"path": "/apis/x/2", "body": {}}'
    assert server.connections == 1

    other = threading.Thread(target=connections.request, args=("PATCH", "/apis/y", b"{}", {}))
    other.start()
    other.join(timeout=10)
    assert server.connections == 2, "another thread has its own connection"
    connections.close()


def test_a_connection_closed_while_idle_is_replaced_once(server: Server) -> None:
    connections = KeptAliveConnections(server.url, None)
    server.hang_up_after_answer = True
    assert connections.request("PATCH", "/a", b"{}", {})[0] == 200
    assert connections.request("PATCH", "/b", b"{}", {})[0] == 200
    assert server.paths == ["/a", "/b"], "each request answered once"
    assert server.connections == 2
    connections.close()


def test_an_answer_other_than_2xx_is_returned_with_its_body(server: Server) -> None:
    connections = KeptAliveConnections(server.url + "/prefix/", None)
    status, reason, body = connections.request("PATCH", "/apis/absent", b'{"a": 1}', {})
    assert (status, reason) == (404, "Not Found")
    assert body == b'{"path": "/prefix/apis/absent", "body": {"a": 1}}'
    connections.close()


def test_a_server_that_is_not_there_is_an_error_at_once() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    connections = KeptAliveConnections(f"http://127.0.0.1:{port}", None, connect_timeout_s=2.0)
    with pytest.raises(ConnectionRefusedError):
        connections.request("PATCH", "/a", b"{}", {})


def test_the_configuration_decides_tls_and_proxy() -> None:
    def configuration(**overrides: Any) -> SimpleNamespace:
        settings: dict[str, Any] = {
            "host": "https://10.0.0.1:6443",
            "proxy": None,
            "verify_ssl": False,
            "ssl_ca_cert": None,
            "assert_hostname": None,
            "cert_file": None,
            "key_file": None,
            "tls_server_name": None,
        }
        return SimpleNamespace(**{**settings, **overrides})

    assert KeptAliveConnections.from_client_configuration(configuration(proxy="http://proxy:3128")) is None
    assert KeptAliveConnections.from_client_configuration(configuration()) is not None
    unverified = tls_context(configuration())
    assert (unverified.verify_mode, unverified.check_hostname) == (ssl.CERT_NONE, False)
    with pytest.raises(ValueError, match="not an HTTP"):
        KeptAliveConnections("unix:///var/run/api.sock", None)


@pytest.mark.parametrize(
    ("no_proxy", "through_proxy"),
    [
        ("", True),
        ("10.96.0.1", False),
        ("10.0.0.0/8", False),
        (".svc,example.com", True),
        ("*", False),
    ],
)
def test_a_server_named_in_no_proxy_is_reached_directly(no_proxy: str, through_proxy: bool) -> None:
    configuration = SimpleNamespace(
        host="https://10.96.0.1:443",
        proxy="http://proxy.internal:3128",
        no_proxy=no_proxy,
        verify_ssl=False,
        ssl_ca_cert=None,
        assert_hostname=None,
        cert_file=None,
        key_file=None,
        tls_server_name=None,
    )
    assert (proxy_for(configuration) is not None) is through_proxy
    kept_alive = KeptAliveConnections.from_client_configuration(configuration)
    assert (kept_alive is None) is through_proxy


def test_an_older_client_without_its_no_proxy_rules_uses_the_standard_librarys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kubernetes.client import rest

    monkeypatch.delattr(rest, "should_bypass_proxies", raising=False)
    configuration = SimpleNamespace(host="https://10.96.0.1:443", proxy="http://proxy:3128", no_proxy="")
    assert [
        proxy_for(SimpleNamespace(**{**vars(configuration), "no_proxy": no_proxy}))
        for no_proxy in ("10.96.0.1", "*", ".svc", "10.0.0.0/8")
    ] == [None, None, "http://proxy:3128", "http://proxy:3128"], "no networks in the standard library's rules"

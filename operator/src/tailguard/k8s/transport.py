"""How tailguard reaches the API server beside the official client: the TLS context its
configuration describes (for the watch and the writers), and the writers' kept-alive connections.

The control loop's status writes, about one per service and minute, are merge patches whose
answer is the whole object. Through the official client's pool manager each cost about twice the
CPU of the request itself (URL parsing, pool lookup, header and retry machinery); a writer thread
here keeps one HTTP/1.1 connection to the API server and sends each patch as one request on it
(see docs/benchmarks.md). Behind a proxy the official client's pool is used instead.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit
from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]  # (not in typeshed)

#: The errors of a connection the server closed while it was idle: the request was not answered,
#: and is sent once more on a new connection (a merge patch gives the same object twice; one
#: conditional on a version that did land is refused as a conflict, which the loop handles).
_CLOSED_WHILE_IDLE = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    ConnectionAbortedError,
    ssl.SSLEOFError,
)


def proxy_for(configuration: Any) -> str | None:
    """The proxy the official client's configuration sends requests to its server through: its
    ``proxy`` (from the kubeconfig's ``proxy-url`` or the environment), unless its ``no_proxy``
    (or the environment's ``NO_PROXY``) names the server."""
    proxy = getattr(configuration, "proxy", None) or None
    no_proxy = getattr(configuration, "no_proxy", None) or ""
    if proxy is None or not no_proxy:
        return proxy
    return None if _bypasses(str(configuration.host), no_proxy) else proxy


def _bypasses(url: str, no_proxy: str) -> bool:
    """Whether ``no_proxy`` names the server of ``url``: by the official client's own rules where it
    has them (host names, suffixes, ports, addresses and networks), by the standard library's
    otherwise (no networks)."""
    try:
        from kubernetes.client.rest import should_bypass_proxies
    except ImportError:  # an older client
        return bool(proxy_bypass_environment(urlsplit(url).hostname or "", {"no": no_proxy}))
    return bool(should_bypass_proxies(url, no_proxy))


def tls_context(configuration: Any) -> ssl.SSLContext:
    """The TLS settings of the official client's configuration (kubeconfig or in-cluster): its CA
    bundle, whether to verify the server, and its client certificate."""
    if configuration.verify_ssl:
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if configuration.assert_hostname is False:
            context.check_hostname = False
    else:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context


class _Connection(http.client.HTTPConnection):
    """An HTTP/1.1 connection, over TLS when given a context, with its own connect timeout and
    TLS server name."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        context: ssl.SSLContext | None,
        server_name: str | None,
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> None:
        super().__init__(host, port, timeout=read_timeout_s)
        self._context = context
        self._server_name = server_name
        self._connect_timeout_s = connect_timeout_s

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self._connect_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._context is not None:
            sock = self._context.wrap_socket(sock, server_hostname=self._server_name or self.host)
        sock.settimeout(self.timeout)
        self.sock = sock


class KeptAliveConnections:
    """One kept-alive connection to the API server per thread that uses it."""

    def __init__(
        self,
        base_url: str,
        context: ssl.SSLContext | None,
        *,
        server_name: str | None = None,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
    ) -> None:
        split = urlsplit(base_url)
        if split.scheme not in ("http", "https") or not split.hostname:
            raise ValueError(f"not an HTTP(S) server address: {base_url!r}")
        self._host = split.hostname
        self._port = split.port or (443 if split.scheme == "https" else 80)
        self._prefix = split.path.rstrip("/")
        self._context = context if split.scheme == "https" else None
        self._server_name = server_name
        self._timeouts = (connect_timeout_s, read_timeout_s)
        self._local = threading.local()

    @classmethod
    def from_client_configuration(
        cls, configuration: Any, *, connect_timeout_s: float = 10.0, read_timeout_s: float = 60.0
    ) -> KeptAliveConnections | None:
        """Connections to the server of the official client's configuration, with its TLS settings;
        ``None`` when it goes through a proxy (the official client's pool handles that)."""
        if proxy_for(configuration) is not None:
            return None
        host = str(configuration.host)
        return cls(
            host,
            tls_context(configuration) if host.startswith("https:") else None,
            server_name=getattr(configuration, "tls_server_name", None) or None,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
        )

    def request(
        self, method: str, path: str, body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, str, bytes]:
        """Send one request on this thread's connection; its status, reason and body. A connection
        the server closed while idle is replaced once; any other failure closes it and is raised."""
        for attempt in range(2):
            connection = self._local.__dict__.get("connection")
            reused = connection is not None and connection.sock is not None
            if connection is None:
                connection = self._local.connection = self._open()
            try:
                connection.request(method, self._prefix + path, body=body, headers=dict(headers))
                response = connection.getresponse()
                data = response.read()
            except _CLOSED_WHILE_IDLE:
                self.close()
                if reused and attempt == 0:
                    continue
                raise
            except BaseException:
                self.close()
                raise
            if response.will_close:
                self.close()
            return response.status, response.reason, data
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close this thread's connection (the next request opens a new one)."""
        connection = self._local.__dict__.pop("connection", None)
        if connection is not None:
            connection.close()

    def _open(self) -> _Connection:
        connect_s, read_s = self._timeouts
        return _Connection(
            self._host,
            self._port,
            context=self._context,
            server_name=self._server_name,
            connect_timeout_s=connect_s,
            read_timeout_s=read_s,
        )

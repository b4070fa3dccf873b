"""Protocol STAND-INS for cluster managers that cannot run on this machine (YARN, Kubernetes).

They are not YARN or Kubernetes: each speaks only the subset of the real protocol the provider uses
(the ResourceManager's REST API and a NodeManager's container logs; the Kubernetes pod API), with
the real URLs, JSON shapes, status codes and auth behaviour, so that the targets' HTTP clients,
state mappings and identity checks are exercised for real. Tests that use them say so. The fake
``spark-submit`` (:mod:`standins.fake_spark_submit`) prints what the real one prints on submission
and records its argv.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class StandInServer:
    """A threaded HTTP server on 127.0.0.1 (an ephemeral port) dispatching to ``handle``; stopped by
    :meth:`close` (tests use it as a context manager)."""

    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _dispatch(self) -> None:
                parsed = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                owner.requests.append((self.command, self.path, dict(self.headers.items()), body))
                status, payload, content_type, *extra = owner.handle(
                    self.command, parsed.path, {k: v[-1] for k, v in parse_qs(parsed.query).items()},
                    dict(self.headers.items()), body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (extra[0] if extra else {}).items():  # e.g. a redirect's Location
                    self.send_header(name, value)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _dispatch  # noqa: N815 - http.server's names

        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        self._thread: threading.Thread | None = None

    def start(self) -> StandInServer:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> StandInServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
               body: bytes) -> tuple[Any, ...]:
        """``(status, payload, content type)``, and optionally a dict of more headers."""
        raise NotImplementedError

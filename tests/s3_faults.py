"""An S3 endpoint that fails like a real one: a proxy on loopback in front of the moto
test server that answers some requests with 503 SlowDown (S3's XML error body), some with
500 InternalError, resets some connections part-way through the request or the response,
and is slow on others; the rest it passes through unchanged.

Which request meets which fate is a seeded schedule, not chance at run time: the n-th
attempt of one (method, path, range) gets ``fate(seed, request, n)``. Requests from many
processes and threads arrive in any order, but each one's own sequence of attempts meets
the same faults every run, so a test's outcome does not depend on timing. Faults come in
streaks, as throttling does: an attempt after a fault fails again more often, up to
``MAX_IN_A_ROW`` times running (longer than the AWS SDK's 3 tries; a bound of five
attempts always gets through), unless the proxy is told to fail a key (or every key)
always: ``fail_always``.
"""

from __future__ import annotations

import hashlib
import http.client
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ("slowdown", "server-error", "reset-request", "reset-response")
MAX_IN_A_ROW = 4
SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>FAULTS</RequestId></Error>"
)
DENIED_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message><RequestId>FAULTS</RequestId></Error>"
)
INTERNAL_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error. Please try again.</Message><RequestId>FAULTS</RequestId></Error>"
)
# The errors the proxy answers for the store: status, reason, S3's XML body. Besides the
# faults of ``FAULTS``, "denied" (credentials refused) for a schedule that asks for it.
ERRORS = {
    "slowdown": (503, "Slow Down", SLOWDOWN_BODY),
    "server-error": (500, "Internal Error", INTERNAL_BODY),
    "denied": (403, "Forbidden", DENIED_BODY),
}
# Headers a proxy answers for itself (hop by hop) instead of passing on.
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "content-length"}


@dataclass
class Schedule:
    """Which requests fail, and how: ``rate`` of them fail (a quarter of those with each
    fault of ``FAULTS``), and ``streak`` of the attempts after a fault (so about 10% of
    all requests fail); ``slow_rate`` of the rest wait ``delay`` seconds first."""

    seed: int = 0
    rate: float = 0.07
    streak: float = 0.4
    slow_rate: float = 0.1
    delay: float = 0.05
    fail_always: str | None = None  # a path part ("" for every path): its requests always answer 503
    seen: Counter = field(default_factory=Counter)  # request -> how many came so far
    in_a_row: Counter = field(default_factory=Counter)  # request -> faults since its last success
    served: Counter = field(default_factory=Counter)  # fault (or "ok", "slow") -> how many
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fate(self, method: str, path: str, byte_range: str) -> str:
        """ "ok", "slow" or one of ``FAULTS`` for this attempt of this request."""
        if self.fail_always is not None and self.fail_always in path:
            return self._count("slowdown")
        request = f"{method} {path} {byte_range}"
        with self.lock:
            n, in_a_row = self.seen[request], self.in_a_row[request]
            self.seen[request] += 1
            draw = _uniform(self.seed, request, n)
            chance = self.streak if in_a_row else self.rate
            fault = draw < chance and in_a_row < MAX_IN_A_ROW
            self.in_a_row[request] = in_a_row + 1 if fault else 0
        if fault:
            return self._count(FAULTS[int(draw / chance * len(FAULTS))])
        return self._count("slow" if draw > 1 - self.slow_rate else "ok")

    def _count(self, what: str) -> str:
        with self.lock:
            self.served[what] += 1
        return what


def _uniform(seed: int, request: str, n: int) -> float:
    """A number in [0, 1) that only the seed, the request and its attempt decide."""
    digest = hashlib.sha256(f"{seed}\0{request}\0{n}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class FaultyProxy:
    """The proxy, serving on a loopback port of its own until ``stop``."""

    def __init__(self, upstream: str, schedule: Schedule):
        host, port = upstream.rsplit(":", 1)
        self.upstream, self.schedule = (host, int(port)), schedule
        handler = type("Handler", (_Handler,), {"proxy": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="s3-faults", daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect
    proxy: FaultyProxy

    def log_message(self, format, *args) -> None:  # quiet: a test's output is its own
        pass

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client gave up on this connection: so do we

    def _any(self) -> None:
        path = self.path.split("?", 1)[0]
        fate = self.proxy.schedule.fate(self.command, path, self.headers.get("Range", ""))
        if fate == "reset-request":  # part of the body read, no answer
            self.rfile.read(int(self.headers.get("Content-Length") or 0) // 2)
            self._reset()
            return
        body = self._body()
        if fate in ERRORS:
            status, reason, error = ERRORS[fate]
            self._answer(status, reason, {"Content-Type": "application/xml"}, error)
            return
        if fate == "slow":
            time.sleep(self.proxy.schedule.delay)
        self._answer(*self._forward(body), cut=fate == "reset-response", short=fate == "short")

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self, body: bytes) -> tuple[int, str, dict[str, str], bytes]:
        connection = http.client.HTTPConnection(*self.proxy.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            connection.request(
                self.command, self.path, body=body if body or self.command in ("PUT", "POST") else None, headers=headers
            )
            response = connection.getresponse()
            answer = response.read()
            if response.status >= 500:  # the server's own failure, not one of ours
                self.proxy.schedule._count(f"upstream {response.status} {self.command} {self.path}")
            kept = {k: v for k, v in response.getheaders() if k.lower() not in HOP_HEADERS}
            if self.command == "HEAD":  # a HEAD's length is the object's, not of a body
                kept["Content-Length"] = response.getheader("Content-Length", "0")
            return response.status, response.reason, kept, answer
        finally:
            connection.close()

    def _answer(
        self, status: int, reason: str, headers: dict, body: bytes, cut: bool = False, short: bool = False
    ) -> None:
        """Send the answer; ``cut``: half of it (of the headers, for an empty body), then
        reset; ``short``: the headers and half the body, then an orderly close (FIN)."""
        head = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
        if "Content-Length" not in headers:
            head.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode()
        if self.command != "HEAD":
            data += body
        if short and body:
            self.wfile.write(data[: len(data) - len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if cut:
            self.wfile.write(data[: len(data) // 2 if body and self.command != "HEAD" else len(head[0])])
            self.wfile.flush()
            self._reset()
            return
        self.wfile.write(data)
        self.wfile.flush()

    def _reset(self) -> None:
        """Close with a TCP reset (RST), as a dropped connection looks to the client."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.rfile.close()  # its reference would keep the socket open past close()
        self.connection.close()  # now, before the server's shutdown() would send a polite FIN

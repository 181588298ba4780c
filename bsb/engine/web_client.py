"""One JSON POST to a server bsb does not control (an LLM judge), bounded in every way a reply can abuse:

* **no redirect is followed**: a 3xx is an error, so a request (and its API key) never goes to another origin;
* **one deadline per call**: a timer shuts the socket at ``deadline_s`` after the call starts, so a reply that drips
  a byte a second cannot stretch the call (a socket timeout alone bounds each read, not their sum);
* **a size cap**: at most ``max_bytes`` of body are read (a declared or chunked body beyond it is an error);
* **the JSON bounded**: a reply that does not parse, nests too deep, or is not an object is an error.

Every failure is an :class:`HTTPFailure` whose ``reason`` is a short label the caller counts (``timeout``,
``unreachable``, ``redirect``, ``HTTP 500``, ``reply too large``, ``malformed HTTP reply``, ``malformed JSON``).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from urllib.parse import urlsplit

MAX_REPLY_BYTES = 8 * 2**20  # a judge's or a probe's reply is a few KB; anything near this is no LLM server's


class HTTPFailure(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def post_json(url: str, body: dict, headers: dict, deadline_s: float, max_bytes: int = MAX_REPLY_BYTES) -> dict:
    """POST ``body`` as JSON to ``url`` and return the reply's JSON object (see the module docstring)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HTTPFailure("bad url")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname, parts.port, timeout=deadline_s)
    expired = threading.Event()

    def expire():
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(deadline_s, expire)
    timer.daemon = True
    start = time.monotonic()
    timer.start()
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("POST", path, body=json.dumps(body).encode(), headers={**headers, "Connection": "close"})
        resp = conn.getresponse()
        if 300 <= resp.status < 400:
            raise HTTPFailure("redirect")  # never followed: the key stays with the configured origin
        if resp.status != 200:
            raise HTTPFailure(f"HTTP {resp.status}")
        declared = resp.getheader("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise HTTPFailure("reply too large")
        data = resp.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise HTTPFailure("reply too large")
        if declared is not None and declared.isdigit() and len(data) != int(declared):
            raise HTTPFailure("timeout" if expired.is_set() else "malformed HTTP reply")  # cut short
    except HTTPFailure:
        raise
    except (OSError, http.client.HTTPException, ValueError) as err:
        if (
            expired.is_set()
            or isinstance(err, (TimeoutError, socket.timeout))
            or time.monotonic() - start >= deadline_s
        ):
            raise HTTPFailure("timeout") from None
        if isinstance(err, (ConnectionRefusedError, socket.gaierror)) or (
            isinstance(err, OSError) and conn.sock is None
        ):
            raise HTTPFailure("unreachable") from None
        raise HTTPFailure("malformed HTTP reply") from None
    finally:
        timer.cancel()
        conn.close()
    if expired.is_set():
        raise HTTPFailure("timeout")
    try:
        reply = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise HTTPFailure("malformed JSON") from None
    if not isinstance(reply, dict):
        raise HTTPFailure("malformed JSON")
    return reply

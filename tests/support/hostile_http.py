"""A raw TCP server that answers every connection with a scripted, possibly hostile, HTTP reply: ``reply(server)`` is
an iterable of ``bytes`` chunks or ``float`` pauses (seconds), sent in order; the request it read is recorded. Used to
show that bsb's HTTP clients follow no redirect, keep one deadline per call, cap the reply and refuse malformed ones.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class HostileServer:
    def __init__(self, reply):
        self.reply, self.requests = reply, []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(v)
                    for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")[1:])
                    if k.strip().lower() == b"content-length"
                ),
                0,
            )
            while len(body) < length:
                body += conn.recv(65536)
            self.requests.append(head.decode(errors="replace"))
            for part in self.reply(self):
                if self.stop.is_set():
                    return
                if isinstance(part, float):
                    time.sleep(part)
                else:
                    conn.sendall(part)

    def close(self):
        self.stop.set()
        self.sock.close()


def response(body: bytes | str, status: str = "200 OK", headers: tuple[str, ...] = ()) -> list[bytes]:
    body = body.encode() if isinstance(body, str) else body
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}", *headers]
    return [("\r\n".join(head) + "\r\n\r\n").encode() + body]

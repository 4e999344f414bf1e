"""A fault-injecting proxy between clients and a store's Unix socket, as the
core's tests use (core/tests/common.rs): it forwards whole frames (a 4-byte
big-endian length, then the body) and can stall all traffic or cut every
connection. Plain threads, so it keeps working while a test's loop waits."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path
from typing import List, Optional


class Proxy:
    """Listens on ``<dir>/proxy.sock`` and forwards each connection to ``target``."""

    def __init__(self, dir: Path, target: Path) -> None:
        self.path = dir / "proxy.sock"
        self.path.unlink(missing_ok=True)
        self._target = str(target)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(16)
        self._lock = threading.Lock()
        self._conns: List[socket.socket] = []
        self._stalled = False
        self._generation = 0
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"unix:{self.path}"

    def stall(self) -> None:
        """Holds every frame, both ways, until :meth:`resume` (or a cut)."""
        self._stalled = True

    def resume(self) -> None:
        self._stalled = False

    def cut(self) -> None:
        """Cuts every connection now; clients may connect again through the proxy."""
        with self._lock:
            self._generation += 1
            conns, self._conns = self._conns, []
        for s in conns:
            _shutdown(s)

    def close(self) -> None:
        self.cut()
        _shutdown(self._listener)
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self._target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, server]
                generation = self._generation
                self.accepted += 1
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b, generation), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, generation: int) -> None:
        try:
            while True:
                head = _read(src, 4)
                body = _read(src, struct.unpack(">I", head)[0]) if head else None
                if body is None:
                    break
                while self._stalled and self._generation == generation:
                    time.sleep(0.005)
                if self._generation != generation:
                    break
                dst.sendall(head + body)
        except OSError:
            pass
        _shutdown(src)
        _shutdown(dst)


def _read(s: socket.socket, n: int) -> Optional[bytes]:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _shutdown(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass

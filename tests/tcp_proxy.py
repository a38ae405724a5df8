"""A TCP forwarder on loopback that a test can cut and restore, to isolate a node from a server.

`CuttableProxy(host, port)` listens on 127.0.0.1 (`.port`) and forwards each connection to
`host:port`. `cut()` closes every forwarded connection and from then on closes new ones as
soon as they are accepted (a refused connection, as the client sees it), until `restore()`.
"""

from __future__ import annotations

import contextlib
import socket
import threading

CONNECT_TIMEOUT = 5.0
CHUNK = 64 * 1024


class CuttableProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._cut = False
        self._closed = False
        self._open: set[socket.socket] = set()
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"proxy-{self.port}", daemon=True)
        self._acceptor.start()

    def cut(self) -> None:
        """Close every forwarded connection; close new ones at once until `restore()`."""
        with self._lock:
            self._cut = True
            doomed, self._open = self._open, set()
        for sock in doomed:
            _shut(sock)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        self.cut()
        self._acceptor.join(CONNECT_TIMEOUT + 1)

    def __enter__(self) -> CuttableProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                continue
            if self._cut or self._closed:
                _shut(client)
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=CONNECT_TIMEOUT)
            except OSError:
                _shut(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._cut or self._closed:
                    _shut(client)
                    _shut(upstream)
                    continue
                self._open |= {client, upstream}
            for source, destination in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, destination), daemon=True).start()

    def _pump(self, source: socket.socket, destination: socket.socket) -> None:
        """Copy one direction until either side ends, then close both."""
        try:
            while data := source.recv(CHUNK):
                destination.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._open -= {source, destination}
        _shut(source)
        _shut(destination)


def _shut(sock: socket.socket) -> None:
    # shutdown() first: unlike close(), it wakes a thread blocked in recv() on the socket
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()

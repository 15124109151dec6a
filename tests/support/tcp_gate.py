"""A TCP forwarder that can be closed and opened again: an object store outage without losing the
store's data (moto keeps its buckets in memory, so killing it would lose them).

    gate = TcpGate(("127.0.0.1", moto_port)).open()
    ... clients use gate.url ...
    gate.close()   # new connections are refused, live ones are cut: "the endpoint is down"
    gate.open()    # same port again: "the endpoint is back"
    gate.stall()   # connections are accepted, requests never answered (a server stopped with SIGSTOP)
    gate.resume()  # held bytes flow again: "the server was continued"
"""

from __future__ import annotations

import socket
import threading

from tests.support.s3_fixture import free_port


class TcpGate:
    def __init__(self, target: tuple[str, int], port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._flowing = threading.Event()  # cleared while stalled: the pipes hold what they read
        self._flowing.set()

    def open(self) -> TcpGate:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def close(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            listener.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def stall(self) -> None:
        """Accept and read, answer nothing: the peer waits until ``resume`` (or its own timeout)."""
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

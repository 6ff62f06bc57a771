# SPDX-License-Identifier: MIT
"""A TCP forwarder for the integration tests: a port on 127.0.0.1 whose
connections are relayed, byte for byte, to a target (a TCP address or a
Unix socket path); with several targets its n-th connection goes to
targets[n % len]. Tests use it as a server that comes up late or goes
away, as a round-robin load balancer, and as a TCP door to a Unix socket
(which a network namespace of a test's own cannot reach over TCP)."""
import contextlib
import socket
import threading


class Forwarder:
    def __init__(self, targets, port=0, start=True):
        self.targets = list(targets)
        self.port = port
        self.n = 0           # connections accepted
        self.lsock = None
        self.socks = []
        if start:
            self.start()

    def start(self):
        """Listen (on self.port, or a free one), relaying from now on."""
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", self.port))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _connect(self, target):
        if isinstance(target, str):
            s = socket.socket(socket.AF_UNIX)
            s.connect(target)
            return s
        return socket.create_connection(target)

    def _accept(self):
        while True:
            try:
                a, _ = self.lsock.accept()
            except OSError:
                return
            b = self._connect(self.targets[self.n % len(self.targets)])
            self.n += 1
            self.socks += [a, b]
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(x, y), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        """One direction; its end is passed on as the peer's end of input."""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def stop(self, connections=False):
        """No new connections (the target "goes away"); connections=True
        closes those relayed so far too."""
        if self.lsock:
            with contextlib.suppress(OSError):
                self.lsock.shutdown(socket.SHUT_RDWR)   # (wakes the accept; close alone would not)
            self.lsock.close()
        for s in self.socks if connections else ():
            with contextlib.suppress(OSError):
                s.close()

    def close(self):
        self.stop(connections=True)

"""Real servers for the mnemo package's tests: mnemod ($MNEMOD_BIN, default
target/debug/mnemod) and memcached (on PATH), each on a free port, waited for by connecting in a
loop with a deadline (never a fixed sleep), killed when the session ends. The same idea as the
repository's tests/servers.py, kept here so the package's tests stand alone.
"""
import itertools
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import mnemo

ROOT = pathlib.Path(__file__).resolve().parents[2]
MNEMOD = os.environ.get("MNEMOD_BIN", str(ROOT / "target" / "debug" / "mnemod"))
MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"
_ports = itertools.count()


def free_port():
    """Below the ephemeral range (so no outgoing connection takes it first), never twice."""
    while True:
        port = 21000 + (os.getpid() % 389 * 31 + next(_ports)) % 11000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


class Server:
    """One mnemod or memcached process on 127.0.0.1."""

    def __init__(self, kind, *extra, port=None, wait=True):
        self.kind, self.extra, self.fixed = kind, extra, port
        self.port = port or free_port()
        self.spawn()
        if wait:
            self.wait()

    @classmethod
    def many(cls, n, kind, *extra):
        """n servers started at once, then waited for (their start-up overlaps)."""
        servers = [cls(kind, *extra, wait=False) for _ in range(n)]
        for s in servers:
            s.wait()
        return servers

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def spawn(self):
        argv = [MNEMOD] if self.kind == "mnemod" else [MEMCACHED]
        if self.kind == "memcached" and os.geteuid() == 0:
            argv += ["-u", "root"]  # memcached refuses to run as root without it
        argv += ["-p", str(self.port), "-l", "127.0.0.1", "-U", "0", *self.extra]
        self.errfile = tempfile.TemporaryFile()
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.errfile)

    def wait(self):
        """Until it accepts connections. A port taken meanwhile (the server exits) is retried
        on another port, up to five times."""
        for attempt in range(5):
            try:
                return self._wait()
            except RuntimeError:
                if self.fixed or attempt == 4 or self.proc.poll() is None:
                    raise
                self.errfile.close()
                self.port = free_port()
                self.spawn()

    def _wait(self):
        argv = self.argv
        deadline = time.monotonic() + 60  # liveness, not timing: a debug mnemod compiles its filters first
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    # A loopback self-connect (source port == port) is not the server.
                    if s.getsockname() != s.getpeername():
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                self.errfile.seek(0)
                raise RuntimeError(f"{argv} exited: {self.errfile.read()!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{argv} did not start")
            time.sleep(0.01)  # polling connect() until the deadline

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.errfile.close()


def raw_get(port, key):
    """(flags, bytes) as the server holds them, or None: a plain `get` on a new socket."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"get " + (key.encode() if isinstance(key, str) else key) + b"\r\n")
        buf = b""
        while not (buf.endswith(b"END\r\n") and (buf.startswith(b"END") or
                                                  len(buf) >= _framed_len(buf))):
            chunk = s.recv(1 << 20)
            if not chunk:
                raise RuntimeError("server closed")
            buf += chunk
    if buf.startswith(b"END"):
        return None
    head, rest = buf.split(b"\r\n", 1)
    _, _, flags, n = head.split(b" ")[:4]
    return int(flags), rest[:int(n)]


def _framed_len(buf):
    if b"\r\n" not in buf:
        return 1 << 62
    head = buf.split(b"\r\n", 1)[0]
    return len(head) + 2 + int(head.split(b" ")[3]) + 2 + 5


@pytest.fixture(scope="session")
def mnemod():
    s = Server("mnemod")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def memcached():
    s = Server("memcached")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def three_mnemods():
    servers = Server.many(3, "mnemod")
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture(params=["mnemod", "memcached"])
def server(request):
    """Each test that takes it runs against mnemod and against memcached."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def client(server):
    c = mnemo.Client([server.addr])
    c.flush_all()
    yield c
    c.close()

"""Start mnemod and the real memcached on free ports for black-box tests.

Servers are waited for by connecting (never by sleeping) and killed when the test ends.
"""
import os
import pathlib
import shutil
import socket
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
MNEMOD = os.environ.get("MNEMOD_BIN", str(ROOT / "target" / "debug" / "mnemod"))
MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, kind, *extra):
        self.kind = kind
        self.port = free_port()
        base = [MNEMOD] if kind == "mnemod" else [MEMCACHED]
        if kind == "memcached" and os.geteuid() == 0:
            base += ["-u", "root"]
        self.proc = subprocess.Popen(
            base + ["-p", str(self.port), "-l", "127.0.0.1", "-U", "0", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{kind} exited: {self.proc.stderr.read().decode()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} did not start on {self.port}")
                time.sleep(0.01)  # polling a connect, not waiting for a fixed time

    def connect(self, timeout=5):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


def stats(sock):
    """Send `stats` and return the fields as a dict of strings."""
    sock.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        d = sock.recv(65536)
        if not d:
            raise ConnectionError("closed")
        buf += d
    out = {}
    for line in buf.decode().splitlines():
        parts = line.split(" ", 2)
        if parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out

"""Start mnemod and the real memcached for black-box tests, and talk to them.

Servers bind 127.0.0.1 on a free port (or a UNIX socket), are waited for by connecting in a
retry loop with a deadline (never by a fixed sleep) and are killed when the test ends.

    mnemod:         $MNEMOD_BIN -p PORT -l 127.0.0.1 -U 0 [extra]
    memcached:      memcached [-u root] -p PORT -l 127.0.0.1 -U 0 [extra]  (Debian 12's 1.6.18)
    memcached-new:  $MEMCACHED_NEW_BIN, the same flags  (Debian 13's 1.6.38, built from its source
                    package by scripts/memcached-new.sh; scripts/test.sh sets the variable)
"""
import itertools
import os
import pathlib
import re
import shutil
import socket
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
MNEMOD = os.environ.get("MNEMOD_BIN", str(ROOT / "target" / "debug" / "mnemod"))
MEMCACHED = shutil.which("memcached") or "/usr/bin/memcached"
MEMCACHED_NEW = os.environ.get("MEMCACHED_NEW_BIN",
                               str(ROOT / "target" / "memcached-new" / "memcached-1.6.38" / "memcached"))


def need_memcached_new():
    """The 1.6.38 reference binary, or a failure that says how to build it (never a skip)."""
    if not os.access(MEMCACHED_NEW, os.X_OK):
        raise RuntimeError(f"{MEMCACHED_NEW} is missing: run `bash scripts/memcached-new.sh` "
                           "(it builds Debian 13's memcached 1.6.38 from its source package)")
    return MEMCACHED_NEW


def reported_version(kind):
    """The memcached release `kind` answers `version` with, from its `-V` line: memcached's
    `memcached 1.6.38`, mnemod's `mnemod 0.1.0 (memcached 1.6.45)` (mnemod's one fact lives in
    crates/server/src/config.rs)."""
    out = subprocess.run(command(kind, "-V"), capture_output=True, text=True).stdout
    return re.search(r"(\d+\.\d+\.\d+)\)?\s*$", out).group(1)


# A `version` reply from any of the servers (1.6.18, 1.6.38 or mnemod's 1.6.45), for tests
# that check a connection is served, not which release answers.
VERSION_REPLY = re.compile(rb"VERSION 1\.6\.\d+\r\n")



def release_neutral(reply):
    """`reply` with its release number taken out (`VERSION 1.6.38` and mnemod's `VERSION
    1.6.45` both become `VERSION 1.6.x`), for comparing conversations across releases."""
    return re.sub(rb"VERSION 1\.6\.\d+", b"VERSION 1.6.x", reply)


def as_1_6_45_stats(names):
    """memcached 1.6.38's `stats` field names as 1.6.45 (which mnemod follows) lists them:
    1.6.40 added `slab_reassign_last_busy_status` before `slab_reassign_running`."""
    names = list(names)
    if "slab_reassign_running" in names and "slab_reassign_last_busy_status" not in names:
        names.insert(names.index("slab_reassign_running"), "slab_reassign_last_busy_status")
    return names


START_DEADLINE = 60.0  # a liveness check, not a timing: a debug mnemod compiles its filters first


_next_port = itertools.count()


def free_port():
    """A port below the kernel's ephemeral range (32768+), free right now, never handed out twice
    by this process: an outgoing connection (or a start-up probe's self-connect) can then never
    take it before the server binds it, nor can another server of this run."""
    while True:
        port = 20000 + (os.getpid() % 397 * 29 + next(_next_port)) % 12000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def command(kind, *extra):
    """The argv that starts `kind` ("mnemod" or "memcached") with memcached's flags."""
    if kind == "mnemod":
        return [MNEMOD, *extra]
    base = [need_memcached_new() if kind == "memcached-new" else MEMCACHED]
    # memcached refuses to run as root without -u; as anyone else -u would fail.
    if os.geteuid() == 0:
        base += ["-u", "root"]
    return base + list(extra)


class Server:
    """One server process. `extra` are memcached-style flags added after -p/-l/-U."""

    def __init__(self, kind, *extra, unix=None):
        self.kind = kind
        self.unix = unix
        # The free port can be taken before the server binds it: by another process's outgoing
        # connection, or by our own start-up probe self-connecting to it (below). The server
        # then exits with EADDRINUSE, and we start again on a new port.
        for attempt in range(5):
            try:
                self._start(extra)
                return
            except RuntimeError as e:
                if unix or attempt == 4 or "in use" not in str(e):
                    raise

    def _start(self, extra):
        unix = self.unix
        self.port = None if unix else free_port()
        where = ["-s", unix] if unix else ["-p", str(self.port), "-l", "127.0.0.1"]
        self.argv = command(self.kind, *where, "-U", "0", *extra)
        # stderr goes to a file: a pipe nobody reads would block a -vv server.
        self.errfile = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self.errfile)
        deadline = time.monotonic() + START_DEADLINE
        while True:
            try:
                s = self.connect(timeout=1)
                # On loopback a connect to a port nobody listens on can succeed as a TCP
                # self-connect (source port == destination port): that is not the server.
                selfconn = not unix and s.getsockname() == s.getpeername()
                s.close()
                if selfconn:
                    raise ConnectionRefusedError("self-connect")
                break
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{' '.join(self.argv)} exited {self.proc.returncode}: {self.stderr()}")
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{' '.join(self.argv)} did not start")
                time.sleep(0.01)  # polling a connect until the deadline

    def connect(self, timeout=5):
        if self.unix:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(self.unix)
            except OSError:
                s.close()
                raise
            return s
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def alive(self):
        return self.proc.poll() is None

    def stderr(self):
        self.errfile.seek(0)
        return self.errfile.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.errfile.close()

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# --- talking to a server -------------------------------------------------------------------------

def roundtrip(sock, req, end=b"\r\n"):
    """Send `req`, read until the reply ends with `end` (or the server closes: `<CLOSED>`)."""
    if req:
        sock.sendall(req)
    buf = b""
    while not buf.endswith(end):
        try:
            d = sock.recv(1 << 20)
        except ConnectionResetError:
            d = b""
        if not d:
            return buf + b"<CLOSED>"
        buf += d
    return buf


def read_until_close(sock):
    """Everything the server sends until it closes (a reset counts as a close)."""
    buf = b""
    while True:
        try:
            d = sock.recv(1 << 20)
        except ConnectionResetError:
            return buf
        if not d:
            return buf
        buf += d


def stats(sock, sub=b""):
    """Send `stats [sub]` and return the fields as a dict of strings."""
    reply = roundtrip(sock, b"stats" + (b" " + sub if sub else b"") + b"\r\n", b"END\r\n")
    out = {}
    for line in reply.decode().splitlines():
        parts = line.split(" ", 2)
        if parts[0] == "STAT":
            out[parts[1]] = parts[2] if len(parts) > 2 else ""
    return out


def served(server):
    """A well-behaved client on a new connection gets a set and a get answered."""
    with server.connect() as s:
        got = roundtrip(s, b"set __ok 0 0 2\r\nok\r\nget __ok\r\n", b"END\r\n")
        assert got == b"STORED\r\nVALUE __ok 0 2\r\nok\r\nEND\r\n", got

"""memcached's UDP protocol (-U) and -d, differentially: the same datagrams go to mnemod and to
the real memcached, and the datagrams that come back must be the same, headers included.

Both servers run with -t 1, so one thread serves each UDP socket and datagrams are answered in
the order sent. After each case a sentinel datagram (`version`, its own request id) follows:
its reply marks the end of the case's replies, so "no reply" is observed without a timeout.
"""
import os
import signal
import socket
import struct
import subprocess
import tempfile
import time

import pytest

from servers import release_neutral, reported_version, Server, command, free_port, roundtrip, stats

SENTINEL_ID = 0xFFFF
BIN_HEADER = ">BBHBBHIIQ"


def free_udp_port():
    while True:
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


# Requests after a get-family request or `mn` in the same datagram are left out of CASES:
# memcached answers them or not depending on timing (udp.rs, module docs); mnemod answers them
# (the unit tests in udp.rs hold that).


class Udp:
    """A server started with -U, and a UDP socket talking to it."""

    def __init__(self, kind, *extra):
        self.udp_port = free_udp_port()
        self.release = reported_version(kind)
        self.server = Server(kind, "-t", "1", "-U", str(self.udp_port), *extra)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        # Room for a multi-megabyte reply that arrives faster than Python reads it (as root,
        # beyond net.core.rmem_max).
        for opt in (getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, 32 << 20)
                break
            except OSError:
                continue
        self.sock.settimeout(10)  # a liveness bound: every exchange ends with the sentinel
        self.wait_udp()

    def wait_udp(self, limit=30):
        """Until the UDP socket answers: the harness waited for the TCP listener, and both
        servers bind UDP after it (a datagram sent in between is lost)."""
        deadline = time.monotonic() + limit
        self.sock.settimeout(0.2)
        try:
            while True:
                self.send(frame(SENTINEL_ID, b"version\r\n"))
                try:
                    d, _ = self.sock.recvfrom(70000)
                    if d[:2] == struct.pack(">H", SENTINEL_ID):
                        break
                except socket.timeout:
                    assert time.monotonic() < deadline, "the UDP port never answered"
            # Answers to repeated probes that crossed the first one: drained.
            while True:
                try:
                    self.sock.recvfrom(70000)
                except socket.timeout:
                    break
        finally:
            self.sock.settimeout(10)

    def send(self, datagram):
        self.sock.sendto(datagram, ("127.0.0.1", self.udp_port))

    def exchange(self, datagram):
        """The datagrams sent back for `datagram`, in arrival order."""
        self.send(datagram)
        self.send(frame(SENTINEL_ID, b"version\r\n"))
        got = []
        while True:
            d, _ = self.sock.recvfrom(70000)
            if d[:2] == struct.pack(">H", SENTINEL_ID):
                assert d[8:].startswith(b"VERSION "), d
                return got
            got.append(d)

    def close(self):
        self.sock.close()
        self.server.stop()


def frame(req_id, body, seq=0, total=1, reserved=0):
    return struct.pack(">HHHH", req_id, seq, total, reserved) + body


def binreq(opcode, key=b"", extras=b"", value=b"", opaque=0):
    body = extras + key + value
    return struct.pack(BIN_HEADER, 0x80, opcode, len(key), len(extras), 0, 0, len(body), opaque, 0) + body


def comparable(datagrams):
    """Datagrams with what is each server's own blanked: a binary reply's CAS (mnemo's CAS is
    where the item lives, memcached's a counter)."""
    out = []
    for d in datagrams:
        if len(d) >= 8 + 24 and d[8] == 0x81 and struct.unpack(">H", d[2:4])[0] == 0:
            d = d[:8 + 16] + b"\0" * 8 + d[8 + 24:]
        out.append(d)
    return out


@pytest.fixture(scope="module")
def pair():
    # The reference since issue 48: 1.6.38; its version number is taken out of the replies.
    servers = [Udp("mnemod"), Udp("memcached-new")]
    yield servers
    for s in servers:
        s.close()


# Requests whose replies memcached 1.6.40's parser changed (1.6.38 answers as 1.6.18 did; mnemod
# follows 1.6.45): each datagram's payload from 1.6.38, then from 1.6.45, recorded from both
# builds (docs/compatibility.md lists each change). A 1.6.45 given as MEMCACHED_NEW_BIN is
# compared with directly.
_FORMAT = b"CLIENT_ERROR bad command line format\r\n"
CHANGED_IN_1_6_40 = {
    b"\r\n": ([b"ERROR\r\n"], [_FORMAT]),
    b"\n": ([b"ERROR\r\n"], [_FORMAT]),
    b"get " + b"k" * 251 + b"\r\n": ([_FORMAT], [_FORMAT + b"\r\n"]),
    b"get foo " + b"k" * 251 + b"\r\n": ([_FORMAT], [_FORMAT + b"\r\n"]),
    b"set y 0 0 1\r\nabc\r\n": ([b"CLIENT_ERROR bad data chunk\r\n", b"ERROR\r\n"],
                                [b"CLIENT_ERROR bad data chunk\r\n", _FORMAT]),
    b"incr\r\n": ([b"ERROR\r\n"], [_FORMAT]),
    b"shutdown\r\n": ([b"ERROR: shutdown not enabled\r\n"], [b"SERVER_ERROR: shutdown not enabled\r\n"]),
    b"version\r\n" + binreq(0x0A): ([b"VERSION 1.6.x\r\n", b"ERROR\r\n"], [b"VERSION 1.6.x\r\n", _FORMAT]),
}


def both(pair, datagram):
    got = [[release_neutral(m) for m in comparable(s.exchange(datagram))] for s in pair]
    change = CHANGED_IN_1_6_40.get(datagram[8:])
    if change is not None and pair[1].release != "1.6.45":
        old, new = change
        assert [d[8:] for d in got[1]] == old, f"memcached {pair[1].release}: {got[1]!r}"
        assert [d[8:] for d in got[0]] == new, f"mnemod (as 1.6.45): {got[0]!r}"
        return got[0]
    assert got[0] == got[1], f"mnemod {got[0]!r}\nmemcached {got[1]!r}"
    return got[0]


BIG = bytes(ord("C") + i % 24 for i in range(20000))

CASES = [
    # storage and retrieval, one message per response object
    b"set foo 0 0 6\r\nfooval\r\n",
    b"get foo\r\n",
    b"set big 3 0 20000\r\n" + BIG + b"\r\n",
    b"get big\r\n",
    b"get big foo\r\n",
    b"get foo nokey foo\r\n",
    b"get foo nokey\r\n",
    b"get nokey foo\r\n",
    b"get nokey nokey2 nokey3\r\n",
    b"get nokey\r\n",
    b"get foo big nokey big\r\n",
    b"version\r\nget nokey nokey2\r\n",
    b"set x 0 0 1 noreply\r\na\r\nget nokey k2\r\n",
    b"quit\r\n",
    b"add foo 0 0 1\r\nb\r\nreplace foo 0 0 2\r\nfv\r\nappend foo 0 0 1\r\nA\r\nprepend foo 0 0 1\r\nP\r\nget foo\r\n",
    b"set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 20\r\nincr nokey 1\r\nincr n x\r\n",
    b"touch foo 100\r\ndelete nokey\r\ngat 0 foo nokey foo\r\n",
    b"delete foo\r\ndelete foo\r\n",
    b"set q 0 0 1 noreply\r\nq\r\ndelete q noreply\r\nincr q 1 noreply\r\n",
    b"ms m 2 T0\r\nab\r\nmg m v f\r\nmg nokey v\r\nmg nokey v q\r\nma m\r\nmd nokey q\r\nmd m\r\nmn\r\n",
    b"version\r\nmn\r\n",
    b"verbosity 0\r\nflush_all 0\r\nget big\r\n",
    # errors
    b"bogus\r\n",
    b"\r\n",
    b"\n",
    b"get " + b"k" * 251 + b"\r\n",
    b"get foo " + b"k" * 251 + b"\r\n",
    b"set y 0 0 1\r\nabc\r\n",
    b"set y 0 0 zz\r\n",
    b"incr\r\n",
    b"shutdown\r\n",
    b"get " + b" ".join(b"k%d" % i for i in range(3000)) + b"\r\n",
    # the protocol is chosen per request
    binreq(0x01, b"bk", struct.pack(">II", 5, 0), b"bval") + binreq(0x00, b"bk"),
    binreq(0x00, b"nokey"),
    binreq(0x09, b"bk") + binreq(0x09, b"nokey") + binreq(0x0A),
    binreq(0x05, b"bn", struct.pack(">QQI", 1, 7, 0)) + binreq(0x05, b"bn", struct.pack(">QQI", 3, 0, 0)),
    binreq(0x04, b"bk") + binreq(0x04, b"bk"),
    binreq(0x00, b"bk")[:20],
    binreq(0x0A) + b"version\r\n",
    b"version\r\n" + binreq(0x0A),
]


@pytest.mark.parametrize("body", CASES, ids=range(len(CASES)))
def test_replies_are_memcacheds(pair, body):
    both(pair, frame(1234 + len(body) % 1000, body))


def test_a_multi_datagram_reply_reassembles(pair):
    both(pair, frame(52, b"set big 3 0 20000\r\n" + BIG + b"\r\n"))
    got = both(pair, frame(53, b"get big\r\n"))
    assert [struct.unpack(">HHHH", d[:8]) for d in got] == [(53, i, 15, 0) for i in range(15)]
    assert all(len(d) == 1400 for d in got[:-1])
    assert b"".join(d[8:] for d in got) == b"VALUE big 3 20000\r\n" + BIG + b"\r\nEND\r\n"


@pytest.mark.parametrize("datagram", [
    b"",
    b"\x00\x01",
    b"\x00\x01\x00\x00\x00\x01\x00\x00",  # a header and no request
    frame(7, b"get foo\r\n", total=2),  # a request in two datagrams: memcached drops it
    frame(7, b"get foo\r\n", total=0),
    frame(7, b"get foo\r\n", seq=3, reserved=9),  # sequence and reserved are not checked
    frame(7, b"\x00" * 64),
    frame(7, b"get foo"),  # no end of line
])
def test_bad_datagrams(pair, datagram):
    both(pair, datagram)


def test_every_request_id_is_echoed(pair):
    for req_id in (0, 1, 161, 162, 0x7FFF, 0xFFFE):
        assert both(pair, frame(req_id, b"version\r\n"))[0][:2] == struct.pack(">H", req_id)


def test_stats_settings_udpport(pair):
    for s in pair:
        with s.server.connect() as c:
            assert stats(c, b"settings")["udpport"] == str(s.udp_port)


def test_hostile_datagrams_never_hurt():
    """Random bytes, cut requests, a 64 KB datagram of keys and a binary header that
    claims 4 GB: mnemod stays up and answers the next request (seeded, so a failure repeats)."""
    import random
    rng = random.Random(67)
    pieces = [b"get ", b"set k 0 0 ", b"4294967295", b"\r\n", b"\n", b" ", b"\x80", b"\x00" * 24,
              b"mg k v ", b"ms k ", b"incr k ", b"k" * 300, b"gat -1 k ", b"noreply"]
    u = Udp("mnemod")
    try:
        for i in range(400):
            if i % 3 == 0:
                body = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
            else:
                body = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 12)))
            u.send(frame(rng.randrange(SENTINEL_ID), body, total=rng.choice((1, 1, 1, 2))))
            # Paced: a burst of hundreds could overflow the server's socket buffer while its
            # thread is switched out, and a dropped sentinel would read as a hang.
            if i % 50 == 49:
                u.exchange(frame(3, b"version\r\n"))
        u.send(frame(1, b"get " + b"k " * 32000 + b"\r\n"))  # 64 KB of keys
        u.send(frame(2, struct.pack(BIN_HEADER, 0x80, 0x01, 1, 8, 0, 0, 0xFFFFFFFF, 0, 0) + b"x" * 9))
        got = u.exchange(frame(3, b"version\r\n"))
        assert got[-1].startswith(frame(3, b"VERSION ")), got[-1:]
        assert u.server.alive()
    finally:
        u.close()


def test_a_request_cut_short_gets_nothing_and_leaves_nothing():
    """A data block that does not fit its datagram: no reply from either server. memcached then
    takes the next datagram, from whichever client, as the rest of the block (its reply to that
    differs); mnemod drops the request, and the next datagram is a request of its own."""
    u = Udp("mnemod")
    try:
        assert u.exchange(frame(1, b"set a 0 0 10\r\nabc")) == []
        assert u.exchange(frame(2, b"get a\r\n")) == [frame(2, b"END\r\n")]
        assert u.exchange(frame(3, b"set a 0 0 2000000\r\nabc\r\n")) == []
        assert u.exchange(frame(4, b"version\r\n"))[0].startswith(frame(4, b"VERSION"))
    finally:
        u.close()


def test_amplification_is_bounded():
    """memcached answers `get k k k ...` with every value, however many (measured below); mnemod
    stops adding values once a datagram's replies reach 1 MiB (the item size limit, when larger):
    the keys served so far, then END."""
    value = b"v" * 500_000
    sizes = {}
    for kind in ("mnemod", "memcached"):
        u = Udp(kind)
        try:
            with u.server.connect() as c:
                assert roundtrip(c, b"set k 0 0 %d\r\n%s\r\n" % (len(value), value)) == b"STORED\r\n"
            request = b"get" + b" k" * 8 + b"\r\n"
            got = u.exchange(frame(9, request))
            sizes[kind] = sum(len(d) for d in got)
            body = b"".join(d[8:] for d in got)
            assert body.endswith(b"\r\nEND\r\n")
        finally:
            u.close()
    assert sizes["memcached"] > 8 * len(value)
    assert 2 * len(value) < sizes["mnemod"] < (1 << 20) + 2 * len(value), sizes


def test_stats_settings_any_free_port():
    for kind in ("mnemod", "memcached"):
        with Server(kind, "-U", "-1") as srv, srv.connect() as c:
            assert stats(c, b"settings")["udpport"] == "-1", kind


def test_udp_is_off_unless_asked():
    with Server("mnemod") as srv:
        with srv.connect() as c:
            assert stats(c, b"settings")["udpport"] == "0"


# --- -d ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_daemonize(kind, tmp_path):
    """-d: the command returns 0 at once, the server runs on in a session of its own, and -P
    names the server's pid (the child's, not the one that returned)."""
    port = free_port()
    pidfile = tmp_path / "pid"
    argv = command(kind, "-d", "-P", str(pidfile), "-p", str(port), "-l", "127.0.0.1", "-U", "0")
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 30
    pid = None
    try:
        while True:
            try:
                text = pidfile.read_text()
                pid = int(text)
                assert text == f"{pid}\n"
                c = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except (OSError, ValueError):
                assert time.monotonic() < deadline, "the daemon did not come up"
                time.sleep(0.01)  # polling until the deadline
        with c:
            assert stats(c)["pid"] == str(pid)
        assert os.getsid(pid) == pid
        assert os.getsid(pid) != os.getsid(0)
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)


# --- which ports, as memcached's t/issue_67.t asks -------------------------------------------

def port_file_lines(kind, args, tmp_path):
    """The MEMCACHED_PORT_FILENAME lines a server writes for `args` (memcached's test-suite
    protocol: NAME.lck, renamed to NAME once every socket is bound)."""
    path = tmp_path / f"ports.{kind}"
    path.unlink(missing_ok=True)
    env = dict(os.environ, MEMCACHED_PORT_FILENAME=str(path))
    proc = subprocess.Popen(command(kind, "-l", "127.0.0.1", *args), env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not path.exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, f"{kind} {args}: no port file"
            time.sleep(0.01)  # polling until the deadline
        return path.read_text().splitlines()
    finally:
        proc.kill()
        proc.wait()


def test_ports_are_memcacheds(tmp_path):
    tcp, udp = str(free_port()), str(free_udp_port())
    for args in (["-p", tcp], ["-U", udp], ["-p", "-1", "-U", udp], ["-p", tcp, "-U", "-1"],
                 ["-p", "0"], ["-p", "0", "-U", udp], ["-U", "-1"], ["-p", tcp, "-U", "0"],
                 ["-l", "127.0.0.2", "-p", tcp, "-U", udp]):  # -l twice: both, as memcached
        got = {}
        for kind in ("memcached", "mnemod"):
            lines = port_file_lines(kind, args, tmp_path)
            # A port the kernel picked is "any"; one the arguments named stays.
            got[kind] = [l if l.split(": ")[1] in (tcp, udp) else l.split(": ")[0] + ": any" for l in lines]
        assert got["mnemod"] == got["memcached"], args


def test_a_refused_value_inside_its_datagram_is_answered():
    """A value over -I that the datagram holds whole: SERVER_ERROR (none with noreply), and the
    requests after it run."""
    got = []
    for kind, extra in (("mnemod", []), ("memcached", ["-o", "slab_chunk_max=512"])):
        u = Udp(kind, "-I", "1k", "-m", "8", *extra)
        try:
            # 1.6.18 (its slab_chunk_max in bytes); the release number taken out.
            got.append([[release_neutral(d) for d in u.exchange(frame(5, b"set big 0 0 2000\r\n" + b"x" * 2000 + b"\r\nversion\r\n"))],
                        u.exchange(frame(6, b"set big 0 0 2000 noreply\r\n" + b"x" * 2000 + b"\r\nget big\r\n"))])
        finally:
            u.close()
    assert got[0] == got[1]
    assert got[0][0][0] == frame(5, b"SERVER_ERROR object too large for cache\r\n")


def test_fget_over_udp_is_refused_and_the_datagram_goes_on(tmp_path):
    """fget (mnemo's own) runs its filter off the event loop and answers a TCP connection later;
    over UDP it is refused with one line, and the datagram's next request is still served."""
    wat = tmp_path / "noop.wat"
    wat.write_text('(module (memory (export "memory") 1)'
                   ' (func (export "mnemo_abi_version") (result i32) (i32.const 1))'
                   ' (func (export "mnemo_filter") (param i32 i32) (result i32) (i32.const 0)))')
    u = Udp("mnemod", "--filter", f"noop={wat}", "--filter-timeout-ms", "2000")
    try:
        with u.server.connect() as c:
            # Over TCP the same call answers (the filter is loaded).
            assert roundtrip(c, b"fget noop 0 a\r\n\r\n", b"END\r\n") == b"VALUE noop 0 0\r\n\r\nEND\r\n"
        got = u.exchange(frame(5, b"fget noop 0 a\r\n\r\nversion\r\n"))
        body = b"".join(d[8:] for d in got)
        assert body.startswith(b"SERVER_ERROR fget is not served over UDP\r\n"), body
        assert body.endswith(b"\r\n") and b"VERSION " in body, body
    finally:
        u.close()

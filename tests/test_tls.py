"""`-Z` (TLS) beside the real memcached 1.6.18 (Debian's is built with TLS), with real clients:
pymemcache with a `tls_context`, `openssl s_client`, and Python's ssl module speaking the text,
meta and binary protocols. Certificates (a CA, two server certificates, a client certificate)
are made with `openssl` in a temporary directory when the module starts.
"""
import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import time

import pytest
from pymemcache.client.base import Client

from servers import Server, as_1_6_45_stats, command, free_port, release_neutral, roundtrip, stats, VERSION_REPLY

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")

# The reference since issue 48: Debian 13's 1.6.38, built with TLS (scripts/memcached-new.sh).
KINDS = ["memcached-new", "mnemod"]


def _openssl(cwd, *args):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs():
    d = tempfile.mkdtemp(prefix="mnemo-tls-")
    with open(os.path.join(d, "san.cnf"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    # Extensions make X.509 v3 certificates (webpki, under rustls, accepts no other).
    with open(os.path.join(d, "client.cnf"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "2", "-subj", "/CN=mnemo test CA")
    for name, cn, ext in [("server", "localhost", "san.cnf"), ("server2", "localhost", "san.cnf"),
                          ("client", "client", "client.cnf")]:
        _openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={cn}")
        _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-out", f"{name}.crt", "-extfile", ext)
    # memcached drops root privileges to -u's user only when asked; the files stay readable.
    for n in os.listdir(d):
        os.chmod(os.path.join(d, n), 0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def path(certs, name):
    return os.path.join(certs, name)


def tls_flags(certs, more="", crt="server.crt", key="server.key"):
    o = f"ssl_chain_cert={path(certs, crt)},ssl_key={path(certs, key)}"
    return ["-Z", "-o", o + ("," + more if more else "")]


def client_ctx(certs, cert=False, max_version=None):
    ctx = ssl.create_default_context(cafile=path(certs, "ca.crt"))
    if cert:
        ctx.load_cert_chain(path(certs, "client.crt"), path(certs, "client.key"))
    if max_version:
        ctx.maximum_version = max_version
    return ctx


def tls_connect(server, ctx):
    return ctx.wrap_socket(server.connect(), server_hostname="localhost")


def both(*flags):
    return [Server(kind, *flags) for kind in KINDS]


def stop(servers):
    for s in servers:
        s.stop()


# --- the same commands, the same replies ----------------------------------------------------------

CONVERSATION = [
    (b"set a 5 0 3\r\nabc\r\n", b"\r\n"),
    (b"get a b\r\n", b"END\r\n"),
    (b"add a 0 0 1\r\nx\r\n", b"\r\n"),
    (b"append a 0 0 2\r\nde\r\n", b"\r\n"),
    (b"set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\n", b"0\r\n"),
    (b"touch a 100\r\n", b"\r\n"),
    (b"mg a v f t\r\nmn\r\n", b"MN\r\n"),
    (b"ms m 2 T0 F7\r\nhi\r\nmg m v f\r\nma n D3\r\nmg n v\r\nmd m q\r\nmn\r\n", b"MN\r\n"),
    (b"delete a\r\ndelete a\r\n", b"NOT_FOUND\r\n"),
    (b"bogus\r\n", b"\r\n"),
    (b"version\r\n", b"\r\n"),
    (b"refresh_certs\r\n", b"\r\n"),
    (b"refresh_certs noreply\r\nmn\r\n", b"MN\r\n"),
    # A value larger than a TLS record. (Not pipelined with its read: memcached 1.6.18 then
    # leaves the get in OpenSSL's buffer unanswered; test_pipelined_large_value covers mnemod.)
    (b"set big 0 0 100000\r\n" + b"z" * 100000 + b"\r\n", b"\r\n"),
    (b"get big\r\n", b"END\r\n"),
]


def converse(server, ctx):
    s = tls_connect(server, ctx)
    try:
        return [roundtrip(s, req, end) for req, end in CONVERSATION]
    finally:
        s.close()


def test_text_and_meta_replies_match_memcached(certs):
    servers = both(*tls_flags(certs))
    try:
        got = [[release_neutral(r) for r in converse(s, client_ctx(certs))] for s in servers]
    finally:
        stop(servers)
    # The TTL left after `touch a 100` is 100, or 99 where the server's clock ticked between
    # the touch and the mg (each server has its own ticks): the same reply either way.
    ttl = [re.sub(rb" t99\b", b" t100", r) for r in got[0]], [re.sub(rb" t99\b", b" t100", r) for r in got[1]]
    assert ttl[1] == ttl[0]
    assert b" t100" in ttl[0][CONVERSATION.index((b"mg a v f t\r\nmn\r\n", b"MN\r\n"))]
    assert got[1][-4] == b"OK\r\n"


def test_pipelined_large_value(certs):
    with Server("mnemod", *tls_flags(certs)) as server:
        with tls_connect(server, client_ctx(certs)) as s:
            value = os.urandom(150000)
            req = b"set big 0 0 150000\r\n" + value + b"\r\nget big\r\nget big\r\n"
            one = b"VALUE big 0 150000\r\n" + value + b"\r\nEND\r\n"
            assert roundtrip(s, req, b"END\r\nVALUE big 0 150000\r\n" + value + b"\r\nEND\r\n") == b"STORED\r\n" + one * 2


def binary_get(sock, key, opaque=7):
    sock.sendall(struct.pack(">BBHBBHIIQ", 0x80, 0x00, len(key), 0, 0, 0, len(key), opaque, 0) + key)
    head = b""
    while len(head) < 24:
        head += sock.recv(24 - len(head))
    _, op, _, extlen, _, status, bodylen, opq, _ = struct.unpack(">BBHBBHIIQ", head)
    body = b""
    while len(body) < bodylen:
        body += sock.recv(bodylen - len(body))
    return op, status, opq, body


def test_binary_protocol_over_tls(certs):
    servers = both(*tls_flags(certs))
    try:
        got = []
        for server in servers:
            with tls_connect(server, client_ctx(certs)) as s:
                assert roundtrip(s, b"set bk 9 0 2\r\nhi\r\n") == b"STORED\r\n"
            with tls_connect(server, client_ctx(certs)) as s:
                got.append((binary_get(s, b"bk"), binary_get(s, b"missing")))
    finally:
        stop(servers)
    assert got[1] == got[0]
    assert got[1][0] == (0x00, 0, 7, struct.pack(">I", 9) + b"hi")


def test_pymemcache_with_a_tls_context(certs):
    servers = both(*tls_flags(certs))
    try:
        results = []
        for server in servers:
            c = Client(("127.0.0.1", server.port), tls_context=client_ctx(certs), timeout=5)
            c.set("k", b"v1")
            c.set_many({"x": b"1", "y": b"2"})
            results.append((c.get("k"), c.get_many(["x", "y", "z"]), c.incr("x", 4), c.delete("y"),
                             c.get("y"), release_neutral(b"VERSION " + c.version())))
            c.close()
    finally:
        stop(servers)
    assert results[1] == results[0]
    assert results[1][0] == b"v1"


@pytest.mark.parametrize("kind", KINDS)
def test_openssl_s_client(certs, kind):
    server = Server(kind, *tls_flags(certs))
    try:
        out = subprocess.run(
            ["openssl", "s_client", "-connect", f"127.0.0.1:{server.port}", "-CAfile", path(certs, "ca.crt"),
             "-verify_return_error", "-quiet"],
            input=b"set s 0 0 2\r\nok\r\nget s\r\nquit\r\n", capture_output=True, timeout=20)
    finally:
        server.stop()
    assert out.stdout == b"STORED\r\nVALUE s 0 2\r\nok\r\nEND\r\n", out.stderr


def test_notls_listener_stays_plain(certs):
    """memcached's `-l notls:ADDR`: with -Z, that listener serves plain text."""
    got = []
    for kind in KINDS:
        tls_port, plain_port = free_port(), free_port()
        proc = subprocess.Popen(command(kind, "-p", str(tls_port), "-U", "0",
                                        "-l", f"127.0.0.1,notls:127.0.0.1:{plain_port}", *tls_flags(certs)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 15
            while True:
                try:
                    plain = socket.create_connection(("127.0.0.1", plain_port), timeout=5)
                    break
                except OSError:
                    assert time.monotonic() < deadline and proc.poll() is None, kind
                    time.sleep(0.01)
            with plain:
                plain_reply = roundtrip(plain, b"version\r\n")
            tls = client_ctx(certs).wrap_socket(socket.create_connection(("127.0.0.1", tls_port), timeout=5),
                                                server_hostname="localhost")
            with tls:
                got.append((plain_reply, roundtrip(tls, b"version\r\n")))
        finally:
            proc.kill()
            proc.wait()
    assert len(got) == 2 and all(VERSION_REPLY.fullmatch(r) for pair in got for r in pair), got


# --- client certificates and versions -------------------------------------------------------------

def handshake_ok(server, ctx):
    """Whether a request is answered (TLS 1.3 reports a refused client certificate only
    on the first read, so a request is sent and its reply awaited)."""
    try:
        with tls_connect(server, ctx) as s:
            return VERSION_REPLY.fullmatch(roundtrip(s, b"version\r\n")) is not None
    except (ssl.SSLError, OSError):
        return False


@pytest.mark.parametrize("mode,anonymous_ok", [(0, True), (1, True), (2, False), (3, False)])
def test_verify_mode(certs, mode, anonymous_ok):
    servers = both(*tls_flags(certs, f"ssl_verify_mode={mode},ssl_ca_cert={path(certs, 'ca.crt')}"))
    try:
        for server in servers:
            assert handshake_ok(server, client_ctx(certs, cert=True)), server.kind
            assert handshake_ok(server, client_ctx(certs)) == anonymous_ok, server.kind
    finally:
        stop(servers)


def test_min_version_tls13_refuses_tls12(certs):
    servers = both(*tls_flags(certs, "ssl_min_version=3"))
    try:
        for server in servers:
            assert not handshake_ok(server, client_ctx(certs, max_version=ssl.TLSVersion.TLSv1_2)), server.kind
            assert handshake_ok(server, client_ctx(certs)), server.kind
    finally:
        stop(servers)


def test_ciphers_choose_the_tls12_suite(certs):
    servers = both(*tls_flags(certs, "ssl_ciphers=ECDHE-RSA-AES256-GCM-SHA384"))
    try:
        for server in servers:
            with tls_connect(server, client_ctx(certs, max_version=ssl.TLSVersion.TLSv1_2)) as s:
                assert s.cipher()[0] == "ECDHE-RSA-AES256-GCM-SHA384", server.kind
                assert VERSION_REPLY.fullmatch(roundtrip(s, b"version\r\n"))
    finally:
        stop(servers)


# --- stats ----------------------------------------------------------------------------------------

STATS_FLAGS = [
    "",
    "ssl_session_cache",
    "ssl_verify_mode=1,ssl_ca_cert={ca},ssl_min_version=3,ssl_ciphers=HIGH:!aNULL",
    "ssl_verify_mode=3,ssl_ca_cert={ca},ssl_min_version=0,ssl_wbuf_size=32,ssl_keyformat=1,ssl_kernel_tls",
]


@pytest.mark.parametrize("more", STATS_FLAGS)
def test_stats_and_settings_match_memcached(certs, more):
    servers = both(*tls_flags(certs, more.format(ca=path(certs, "ca.crt"))))
    try:
        got = []
        for server in servers:
            with tls_connect(server, client_ctx(certs, cert=True)) as s:
                general = stats(s)
                settings = stats(s, b"settings")
            got.append((as_1_6_45_stats(general), {k: v for k, v in settings.items() if k.startswith("ssl_")},
                        general.get("ssl_new_sessions")))
    finally:
        stop(servers)
    assert got[1][0] == got[0][0]
    assert got[1][1] == got[0][1]
    assert got[1][2] == got[0][2]


def test_without_z(certs):
    """No -Z: `refresh_certs` is refused with memcached's line, `stats` has no TLS lines, and
    `stats settings` shows the ssl_* options as given."""
    servers = both("-o", f"ssl_chain_cert={path(certs, 'server.crt')},ssl_session_cache")
    try:
        got = []
        for server in servers:
            with server.connect() as s:
                got.append((roundtrip(s, b"refresh_certs\r\nrefresh_certs noreply\r\nmn\r\n", b"MN\r\n"),
                            as_1_6_45_stats(stats(s)),
                            {k: v for k, v in stats(s, b"settings").items() if k.startswith("ssl_")}))
    finally:
        stop(servers)
    assert got[1] == got[0]
    assert got[1][0] == b"Error TLS not enabled\r\nError TLS not enabled\r\nMN\r\n"


def wait_stat(server, ctx, name, want):
    deadline = time.monotonic() + 10
    while True:
        with tls_connect(server, ctx) as s:
            v = stats(s).get(name)
        if v == want or time.monotonic() > deadline:
            return v
        time.sleep(0.02)


def test_handshake_errors_count_a_plain_client(certs):
    """A plain-text client on the TLS port is one ssl_handshake_errors. (Not compared with
    memcached: it counts only a failure its first, non-blocking SSL_accept sees at accept
    time, so whether it counts this client depends on whether the bytes came before the
    accept.)"""
    with Server("mnemod", *tls_flags(certs)) as server:
        ctx = client_ctx(certs)
        # Server's start-up probe (a plain connect and close) is one handshake error too. Its
        # close may reach a worker only after a later connection is served: wait for it.
        before = 1
        assert wait_stat(server, ctx, "ssl_handshake_errors", str(before)) == str(before)
        with server.connect() as plain:
            plain.sendall(b"version\r\n")
            try:
                assert not plain.recv(100).startswith(b"VERSION")
            except OSError:
                pass
        assert wait_stat(server, ctx, "ssl_handshake_errors", str(before + 1)) == str(before + 1)


# --- refresh_certs --------------------------------------------------------------------------------

def test_refresh_certs_new_connections_get_the_new_certificate(certs):
    results = []
    for kind in KINDS:
        live = tempfile.mkdtemp(prefix="mnemo-tls-live-")
        crt, key = os.path.join(live, "live.crt"), os.path.join(live, "live.key")
        shutil.copy(path(certs, "server.crt"), crt)
        shutil.copy(path(certs, "server.key"), key)
        os.chmod(live, 0o755)
        server = Server(kind, "-Z", "-o", f"ssl_chain_cert={crt},ssl_key={key}")
        try:
            ctx = client_ctx(certs)
            old = tls_connect(server, ctx)
            first = old.getpeercert(binary_form=True)
            shutil.copy(path(certs, "server2.crt"), crt)
            shutil.copy(path(certs, "server2.key"), key)
            ok = roundtrip(old, b"refresh_certs\r\n")
            since = stats(old)["time_since_server_cert_refresh"]
            with tls_connect(server, ctx) as new:
                second = new.getpeercert(binary_form=True)
            # The connection made before keeps working.
            still = release_neutral(roundtrip(old, b"version\r\n"))
            # A key that does not match the certificate: an error, and the last good pair stays.
            shutil.copy(path(certs, "client.key"), key)
            bad = roundtrip(old, b"refresh_certs\r\n")
            with tls_connect(server, ctx) as again:
                third = again.getpeercert(binary_form=True)
            old.close()
            results.append((ok, int(since) <= 1, first != second, second == third, still,
                            # The reason after " : " is OpenSSL's text in memcached, rustls's here.
                            bad.split(b" : ")[0].replace(key.encode(), b"KEY")))
        finally:
            server.stop()
            shutil.rmtree(live, ignore_errors=True)
    assert results[1] == results[0]
    assert results[1][0] == b"OK\r\n"
    assert results[1][2] and results[1][3]

"""Command-line and `-o` changes between memcached 1.6.18 and 1.6.45, each against Debian 13's
memcached 1.6.38 (Server("memcached-new")) in the same run. Where 1.6.38 and 1.6.45 differ,
mnemod follows 1.6.45 and the row names it (docs/compatibility.md "Options")."""
import os
import signal
import socket
import ssl
import subprocess
import time

import pytest

from servers import MNEMOD, Server, command, free_port, roundtrip, stats
from test_tls import certs, client_ctx, path, tls_flags  # noqa: F401 (certs is a fixture)


def start_error(kind, *args):
    """The first stderr line and the status of a start that must fail."""
    # A TCP port: memcached checks the -l prefixes only when it binds one.
    where = ["-p", str(free_port()), "-U", "0"]
    argv = command(kind, *where, *args) if kind != "mnemod" else [MNEMOD, *where, *args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert r.returncode != 0, (kind, args, r)
    return r.stderr.strip().splitlines()[0], r.returncode


SETTINGS_FLAGS = [[], ["-o", "slab_chunk_max=256"], ["-o", "slab_chunk_max=16"], ["-o", "no_modern"],
                  ["-o", "no_chunked_items"], ["-o", "no_modern", "-I", "2m"], ["-o", "slab_automove_window=60"],
                  ["-o", "slab_automove_window=1800"]]


@pytest.mark.parametrize("flags", SETTINGS_FLAGS, ids=" ".join)
def test_slab_settings_as_memcached_new(flags):
    """slab_automove_window's default is 10 (1.6.34) and slab_chunk_max is given in KiB
    (1.6.24); `stats settings` shows both as memcached 1.6.38 does."""
    got = {}
    for kind in ("memcached-new", "mnemod"):
        with Server(kind, *flags) as srv, srv.connect() as s:
            st = stats(s, b"settings")
        got[kind] = (st["slab_automove_window"], st["slab_chunk_max"])
    assert got["mnemod"] == got["memcached-new"], got


# (option, 1.6.45's line where 1.6.38's differs)
REFUSED = [
    (["-o", "slab_automove_window=2"], "slab_automove_window must be > 2 and < 1800"),
    (["-o", "slab_automove_window=x"], "slab_automove_window must be > 2 and < 1800"),
    (["-o", "slab_automove_window"], None),
    (["-o", "slab_chunk_max=2048"], None),
    (["-o", "slab_chunk_max=0"], None),
    (["-o", "slab_chunk_max=x"], None),
    (["-o", "slab_chunk_max"], None),
    (["-o", "slab_chunk_max=48"], None),
    (["-o", "slab_chunk_max=1024", "-I", "512k"], None),
    (["-o", "ext_path=EXT:1GB"], "must supply size to ext_path, ie: ext_path=/f/e:64m (m|g|t|p supported)"),
    (["-o", "ext_path=EXT:64k"], "must supply size to ext_path, ie: ext_path=/f/e:64m (m|g|t|p supported)"),
    (["-o", "ext_path=EXT:0m"], None),
    (["-o", "ext_path=EXT:32m"], None),
    (["-o", "ext_path=EXT:64m:hot"], None),
    (["-l", "btls:127.0.0.1"], None),
    (["-l", "mtls:127.0.0.1"], None),
    (["-l", "notls:127.0.0.1"], None),
]


@pytest.mark.parametrize("args,line_1_6_45", REFUSED, ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_refused_as_memcached_new(args, line_1_6_45, tmp_path):
    """mnemod's one line is memcached's first, after its prefix; its status is 2 (memcached:
    1, or 64 for the checks after parsing, 71 for the listeners)."""
    args = [a.replace("EXT", str(tmp_path / "ext")) for a in args]
    mc, _ = start_error("memcached-new", *args)
    mn, status = start_error("mnemod", *args)
    assert status == 2
    assert mn.endswith(line_1_6_45 or mc), (mn, mc)
    if line_1_6_45 is None:
        assert mn.endswith(mc), (mn, mc)
    else:
        assert mc != line_1_6_45, "1.6.38 now says what 1.6.45 says: drop the row's name"


@pytest.mark.parametrize("opts", ["ext_page_size=8,ext_path=EXT:64m:coldcompact", "ext_path=EXT:64m:old",
                                  "ext_path=EXT:1.5G", "ext_path=EXT:64M:compact,ext_path=EXT2:64m:old",
                                  "ext_path=EXT:64m,ext_page_size=8"])
def test_ext_path_forms_start(opts, tmp_path):
    """The buckets (coldcompact and old: 1.6.25), atoi's count, and ext_page_size after
    ext_path (1.6.40; 1.6.38 refuses that one, the row named)."""
    opts = opts.replace("EXT2", str(tmp_path / "e2")).replace("EXT", str(tmp_path / "e1"))
    late_page_size = opts.endswith("ext_page_size=8")
    if late_page_size:
        line, _ = start_error("memcached-new", "-o", opts)
        assert line == "Must specify ext_page_size before any ext_path arguments"
    else:
        Server("memcached-new", "-o", opts).stop()
        for f in tmp_path.iterdir():
            f.unlink()
    with Server("mnemod", "-o", opts) as srv, srv.connect() as s:
        assert roundtrip(s, b"set k 0 0 2\r\nhi\r\nget k\r\n", b"END\r\n") == b"STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\n"
        err = srv.stderr()
    for bucket in ("coldcompact", "old", "compact"):
        assert (f":{bucket}" in opts) == (f"bucket {bucket}: accepted" in err), err


def answers(port, ctx):
    """Whether a TLS client with `ctx` gets a reply on `port`."""
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return roundtrip(s, b"version\r\n").startswith(b"VERSION ")
    except (ssl.SSLError, OSError):
        return False


def test_btls_and_mtls_listeners(certs):
    """1.6.30: with ssl_verify_mode=2 on the default listener, btls: never asks for a client
    certificate and mtls: requires one; both servers alike."""
    got = {}
    for kind in ("memcached-new", "mnemod"):
        b, m = free_port(), free_port()
        flags = tls_flags(certs, f"ssl_verify_mode=2,ssl_ca_cert={path(certs, 'ca.crt')}")
        with Server(kind, "-l", f"btls:127.0.0.1:{b},mtls:127.0.0.1:{m}", *flags) as srv:
            got[kind] = [answers(p, client_ctx(certs, cert)) for p in (srv.port, b, m) for cert in (False, True)]
    assert got["mnemod"] == got["memcached-new"] == [False, True, True, True, False, True], got


def test_mtls_without_a_ca_starts_and_accepts_no_client(certs):
    """1.6.38's t/ssl_ports.t: an mtls: listener with no ssl_ca_cert starts; every client is
    asked for a certificate and none verifies. The default TLS listener serves as usual."""
    got = {}
    for kind in ("memcached-new", "mnemod"):
        m = free_port()
        with Server(kind, "-l", f"mtls:127.0.0.1:{m}", *tls_flags(certs)) as srv:
            got[kind] = [answers(p, client_ctx(certs, cert)) for p in (srv.port, m) for cert in (False, True)]
    assert got["mnemod"] == got["memcached-new"] == [True, True, False, False], got


def test_sighup_reloads_certificates(certs, tmp_path):
    """1.6.40: SIGHUP reloads the certificates as `refresh_certs` does (1.6.38 does not: the
    row is mnemod's alone). A bad file keeps the ones in force."""
    crt = tmp_path / "server.crt"
    crt.write_bytes(open(path(certs, "server.crt"), "rb").read())
    flags = ["-Z", "-o", f"ssl_chain_cert={crt},ssl_key={path(certs, 'server.key')}"]
    with Server("mnemod", *flags) as srv:
        with client_ctx(certs).wrap_socket(srv.connect(), server_hostname="localhost") as s:
            assert int(stats(s)["time_since_server_cert_refresh"]) >= 60
            os.kill(srv.proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 30
            while int(stats(s)["time_since_server_cert_refresh"]) > 5:
                assert time.monotonic() < deadline, "SIGHUP did not reload the certificates"
                time.sleep(0.05)  # polling the maintenance pass until the deadline
            crt.write_text("not a certificate\n")
            os.kill(srv.proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 30
            while "Could not reload TLS certificates on SIGHUP" not in srv.stderr():
                assert time.monotonic() < deadline, srv.stderr()
                time.sleep(0.05)
        assert answers(srv.port, client_ctx(certs)), "the old certificate stays in force"

"""mnemod behind twemproxy (Debian's `nutcracker`), as many memcached fleets run it.

nutcracker distributes keys with ketama over three mnemods; every command goes through it and
its strict reply parser, and every key must sit on the server `mnemo route` names (the client
side's libmemcached-compatible ketama), so a fleet can mix proxied and direct clients.
"""
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
from pymemcache.client.base import Client

from servers import ROOT, Server, free_port, roundtrip

NUTCRACKER = shutil.which("nutcracker") or "/usr/sbin/nutcracker"
MNEMO = os.environ.get("MNEMO_CLI", str(ROOT / "target" / "debug" / "mnemo"))


class Proxy:
    """nutcracker with one ketama pool over `servers` ((port, weight) pairs)."""

    def __init__(self, servers):
        assert os.path.exists(NUTCRACKER), "nutcracker is not installed (scripts/test.sh installs it)"
        self.dir = tempfile.TemporaryDirectory()
        self.port = free_port()
        conf = pathlib.Path(self.dir.name) / "nutcracker.yml"
        lines = [
            "mnemo:",
            f"  listen: 127.0.0.1:{self.port}",
            "  hash: md5",
            "  distribution: ketama",
            "  timeout: 5000",
            "  auto_eject_hosts: false",
            "  servers:",
        ]
        lines += [f"   - 127.0.0.1:{port}:{weight}" for port, weight in servers]
        conf.write_text("\n".join(lines) + "\n")
        self.log = pathlib.Path(self.dir.name) / "nutcracker.log"
        self.proc = subprocess.Popen(
            [NUTCRACKER, "-c", str(conf), "-s", str(free_port()), "-a", "127.0.0.1", "-o", str(self.log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None, f"nutcracker exited: {self.log.read_text()}"
                assert time.monotonic() < deadline, "nutcracker did not start"
                time.sleep(0.01)  # polling a connect until the deadline

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.dir.cleanup()


@pytest.fixture(params=[(1, 1, 1), (1, 2, 3)], ids=["equal", "weighted"])
def fleet(request):
    servers = [Server("mnemod") for _ in range(3)]
    weights = request.param
    proxy = Proxy([(s.port, w) for s, w in zip(servers, weights)])
    yield servers, weights, proxy
    proxy.stop()
    for s in servers:
        s.stop()


def routes(servers, weights, keys):
    """`mnemo route`: key -> "127.0.0.1:port" of the owning server."""
    spec = ",".join(f"127.0.0.1:{s.port}:{w}" for s, w in zip(servers, weights))
    out = subprocess.run([MNEMO, "--servers", spec, "route", "-"], input="\n".join(keys) + "\n",
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split("\t") for line in out.splitlines())


def test_commands_through_nutcracker_land_where_mnemo_route_says(fleet):
    servers, weights, proxy = fleet
    c = Client(("127.0.0.1", proxy.port), timeout=5, default_noreply=False)
    keys = [f"user:{i}:profile" for i in range(600)]
    for k in keys:
        assert c.set(k, f"v-{k}".encode()) is True
    # Multi-get through the proxy (it splits it per server and merges the replies).
    got = c.get_many(keys)
    assert got == {k: f"v-{k}".encode() for k in keys}
    # Counters, deletes, add/replace, cas through the proxy.
    assert c.set("counter", b"10") is True
    assert c.incr("counter", 5) == 15
    assert c.decr("counter", 20) == 0
    assert c.delete(keys[0]) is True
    assert c.get(keys[0]) is None
    assert c.add(keys[1], b"x") is False
    assert c.replace(keys[1], b"replaced") is True
    value, cas = c.gets(keys[2])
    assert c.cas(keys[2], b"new", cas) is True
    assert c.cas(keys[2], b"newer", cas) is False

    # Each key is on the server mnemo route names, and only there.
    where = routes(servers, weights, keys + ["counter"])
    by_addr = {f"127.0.0.1:{s.port}": s for s in servers}
    direct = {addr: Client(("127.0.0.1", s.port), timeout=5) for addr, s in by_addr.items()}
    used = set()
    for k in keys[1:] + ["counter"]:
        owner = where[k]
        used.add(owner)
        for addr, d in direct.items():
            v = d.get(k)
            assert (v is not None) == (addr == owner), f"{k}: on {addr}, route says {owner}"
    assert len(used) == 3, "every server holds some keys"
    assert direct[where[keys[1]]].get(keys[1]) == b"replaced"


def test_an_unknown_verb_like_fget_is_refused_by_the_proxy(fleet):
    """Why fget goes client-side in a proxied fleet (docs/operations.md, "Running a fleet")."""
    _, _, proxy = fleet
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as s:
        assert roundtrip(s, b"fget topk 0 a b\r\n\r\n") == b"<CLOSED>"

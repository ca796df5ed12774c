"""`-o idle_timeout=N` beside the real memcached in the same run: a connection that sends
nothing for longer than N seconds is closed (counted in `stats` idle_kicks, reported by
`stats settings` idle_timeout); so is one that keeps sending bytes of a command that never
completes (the time counts from the last complete command); a connection that keeps talking
is not; without the option nothing is closed and `stats` has no idle_kicks line."""
import socket
import time

import pytest

from servers import Server, roundtrip, stats, VERSION_REPLY

TIMEOUT = 1
# memcached's idle thread looks about once a second: allow a few.
DEADLINE = TIMEOUT + 4.0


def closed_within(sock, seconds):
    """True once the server closes `sock` (EOF or reset) within `seconds`."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


@pytest.mark.parametrize("kind", ["memcached", "mnemod"])
def test_idle_connections_are_closed_and_counted(kind):
    with Server(kind, "-o", f"idle_timeout={TIMEOUT}") as srv:
        idle = srv.connect()
        busy = srv.connect()
        # A half-sent command is still "waiting for a command": it is kicked too.
        partial = srv.connect()
        partial.sendall(b"get some")
        start = time.monotonic()
        while time.monotonic() - start < DEADLINE:
            assert VERSION_REPLY.fullmatch(roundtrip(busy, b"version\r\n"))
            time.sleep(0.3)
        assert closed_within(idle, 0.5), kind
        assert closed_within(partial, 0.5), kind
        st = stats(busy)
        assert int(st["idle_kicks"]) == 2, (kind, st.get("idle_kicks"))
        assert stats(busy, b"settings")["idle_timeout"] == str(TIMEOUT)
        assert srv.alive()
        for s in (idle, busy, partial):
            s.close()


@pytest.mark.parametrize("kind", ["memcached", "mnemod"])
def test_a_command_trickled_byte_by_byte_is_closed_too(kind):
    """Slowloris: one byte every 0.3 s of a line that never ends keeps the connection busy
    but completes no command: it is closed after the timeout, not kept while bytes arrive."""
    with Server(kind, "-o", f"idle_timeout={TIMEOUT}") as srv:
        trickle = srv.connect()
        start = time.monotonic()
        closed_at = None
        sent = 0
        while time.monotonic() - start < DEADLINE:
            try:
                trickle.sendall(b"get " if sent == 0 else b"k")
                sent += 1
            except (BrokenPipeError, ConnectionResetError):
                closed_at = time.monotonic() - start
                break
            if closed_within(trickle, 0.3):
                closed_at = time.monotonic() - start
                break
        assert closed_at is not None, f"{kind}: still open after {DEADLINE} s and {sent} bytes"
        # Closed by the timeout, not by anything the bytes said.
        assert closed_at >= TIMEOUT, (kind, closed_at)
        with srv.connect() as s:
            assert int(stats(s)["idle_kicks"]) == 1, kind
        assert srv.alive()
        trickle.close()


@pytest.mark.parametrize("kind", ["memcached", "mnemod"])
def test_without_idle_timeout_nothing_is_closed(kind):
    with Server(kind) as srv, srv.connect() as idle:
        assert not closed_within(idle, DEADLINE - 2)
        with srv.connect() as s:
            st = stats(s)
            assert "idle_kicks" not in st
            assert stats(s, b"settings")["idle_timeout"] == "0"
        assert VERSION_REPLY.fullmatch(roundtrip(idle, b"version\r\n"))

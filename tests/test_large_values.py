"""Large values (over 32 KiB: mnemod reads them straight into their item and sends them from it)
against the real memcached in the same run: the same bytes in, the same bytes out, and the same
errors for a bad data chunk, with nothing stored."""
import pytest

from servers import Server, roundtrip

SIZES = [32 * 1024 + 1, 100_000, 900_000]


@pytest.fixture(scope="module")
def both():
    with Server("mnemod", "-m", "64") as m, Server("memcached", "-m", "64") as c:
        yield {"mnemod": m, "memcached": c}


def conversation(server, size):
    value = bytes((i * 7 + size) % 251 for i in range(size))
    s = server.connect()
    out = []
    # A good set sent in pieces, read back by get and by mg.
    req = b"set big 5 0 %d\r\n" % size + value + b"\r\n"
    for i in range(0, len(req), 7919):
        s.sendall(req[i:i + 7919])
    out.append(roundtrip(s, b"", b"\r\n"))
    out.append(roundtrip(s, b"get big\r\n", b"END\r\n"))
    out.append(roundtrip(s, b"mg big v f s\r\n", value + b"\r\n"))
    # A bad data chunk: the error, the connection still in step, the old value kept.
    out.append(roundtrip(s, b"set big 0 0 %d\r\n" % size + value + b"XY" + b"get nothing\r\n",
                         b"END\r\n"))
    out.append(roundtrip(s, b"get big\r\n", b"END\r\n"))
    # noreply, then a value that replaces it.
    s.sendall(b"set big 9 0 %d noreply\r\n" % size + value[::-1] + b"\r\n")
    out.append(roundtrip(s, b"get big\r\n", b"END\r\n"))
    s.close()
    return out, value


@pytest.mark.parametrize("size", SIZES)
def test_large_values_as_memcached(both, size):
    got = {name: conversation(srv, size) for name, srv in both.items()}
    (mine, value), (theirs, _) = got["mnemod"], got["memcached"]
    assert mine == theirs
    # And what both said is what a user relies on:
    assert mine[0] == b"STORED\r\n"
    assert mine[1] == b"VALUE big 5 %d\r\n" % size + value + b"\r\nEND\r\n"
    assert mine[4] == mine[1]
    assert mine[5] == b"VALUE big 9 %d\r\n" % size + value[::-1] + b"\r\nEND\r\n"

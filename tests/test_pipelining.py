"""Pipelining: thousands of mixed requests in one write (or cut into arbitrary pieces) are all
answered, in order, exactly as memcached answers them."""
import random
import socket

import pytest

from conversation import normalize_all
from servers import Server, roundtrip


def mixed_requests(n, seed):
    rng = random.Random(seed)
    keys = [b"k%d" % i for i in range(50)]
    out = []
    for _ in range(n):
        k = rng.choice(keys)
        op = rng.randrange(14)
        v = b"%d" % rng.randrange(1000)
        nr = b" noreply" if rng.random() < 0.15 else b""
        if op < 3:
            out.append(b"set %s %d 0 %d%s\r\n%s\r\n" % (k, rng.randrange(5), len(v), nr, v))
        elif op < 6:
            out.append(b"get %s\r\n" % b" ".join(rng.choice(keys) for _ in range(rng.randrange(1, 5))))
        elif op == 6:
            out.append(b"gets %s %s\r\n" % (k, rng.choice(keys)))
        elif op == 7:
            out.append(b"incr %s %d%s\r\n" % (k, rng.randrange(100), nr))
        elif op == 8:
            out.append(b"decr %s %d%s\r\n" % (k, rng.randrange(100), nr))
        elif op == 9:
            out.append(b"delete %s%s\r\n" % (k, nr))
        elif op == 10:
            out.append(b"%s %s 0 0 %d%s\r\n%s\r\n" % (rng.choice([b"add", b"replace", b"append", b"prepend"]), k, len(v), nr, v))
        elif op == 11:
            out.append(b"touch %s %d%s\r\n" % (k, rng.randrange(1, 1000), nr))
        elif op == 12:
            out.append(rng.choice([b"bogus\r\n", b"incr %s abc\r\n" % k, b"set %s 0 0 x\r\n" % k, b"get\r\n"]))
        else:
            out.append(b"gat 100 %s\r\n" % k)
    return out


def converse(server, data, chunks=None):
    with server.connect(timeout=30) as s:
        if chunks is None:
            s.sendall(data)
        else:
            rng = random.Random(chunks)
            i = 0
            while i < len(data):
                n = rng.choice([1, 2, 3, 7, 64, 1000, 4096])
                s.sendall(data[i:i + n])
                i += n
        buf = b""
        while not (buf.endswith(b"\r\n") and buf.rsplit(b"\r\n", 2)[-2].startswith(b"VERSION ")):
            d = s.recv(1 << 20)
            assert d, "closed before the last reply"
            buf += d
        return buf


@pytest.fixture(scope="module")
def pair():
    with Server("memcached") as mc, Server("mnemod") as mn:
        yield mc, mn


@pytest.mark.parametrize("seed,chunks", [(1, None), (2, None), (3, 99)], ids=["one-write", "one-write-2", "cut-up"])
def test_ten_thousand_mixed_requests(pair, seed, chunks):
    mc, mn = pair
    data = b"".join(mixed_requests(10_000 if chunks is None else 3_000, seed)) + b"version\r\n"
    for srv in pair:
        with srv.connect() as s:
            assert roundtrip(s, b"flush_all\r\n") == b"OK\r\n"
    want = converse(mc, data)
    got = converse(mn, data, chunks)
    (want_n, got_n) = normalize_all([want])[0], normalize_all([got])[0]
    if want_n != got_n:
        wl, gl = want_n.split(b"\r\n"), got_n.split(b"\r\n")
        i = next((i for i, (a, b) in enumerate(zip(wl, gl)) if a != b), min(len(wl), len(gl)))
        pytest.fail(f"reply line {i} differs (of {len(wl)} / {len(gl)}):\n"
                    f"  memcached: {wl[max(0, i - 3):i + 3]}\n  mnemod:    {gl[max(0, i - 3):i + 3]}")


def test_pipelined_gets_one_big_write(pair):
    _, mn = pair
    with mn.connect() as s:
        roundtrip(s, b"set pk 0 0 5\r\nhello\r\n")
        n = 10_000
        s.sendall(b"get pk\r\n" * n + b"version\r\n")
        s.settimeout(30)
        buf = b""
        while not buf.endswith(b"\r\n") or b"VERSION " not in buf[-64:]:
            d = s.recv(1 << 20)
            assert d
            buf += d
        one = b"VALUE pk 0 5\r\nhello\r\nEND\r\n"
        assert buf[:len(one) * n] == one * n
        assert buf[len(one) * n:].startswith(b"VERSION ")

"""The meta flags memcached added after 1.6.18 (doc/protocol.txt of 1.6.45), each probe and each
combination run against mnemod and Debian 13's memcached 1.6.38 in the same run; the replies
must be equal (server-chosen CAS numbers normalised to `c#`).

Where 1.6.38 and 1.6.45 differ, mnemod follows 1.6.45: the step carries 1.6.45's documented
reply for mnemod and, named "1.6.38 differs: ...", what 1.6.38 answers (asserted too).

    E  ms md ma, mg with N   the CAS the changed item takes        1.6.27
    x  md                    empty the value, keep the item       1.6.27
    s  ms                    the stored size (joined on append)   1.6.20
    N  ms MA / MP            create a missing item from the data  1.6.20
    C  mg                    no value when the CAS matches        1.6.40
    M  ms ma                 the byte after M, any token length   1.6.45 (proto_parser.c)
"""
import re

import pytest

from servers import Server, roundtrip

# CAS values a test chooses itself (E); every other c token is the server's own counter.
CHOSEN = {"973", "55", "77", "100", "200", "300", "400", "500"}
CAS = re.compile(rb" c(\d+)")


def normalise(reply):
    return CAS.sub(lambda m: m.group(0) if m.group(1).decode() in CHOSEN else b" c#", reply)


# (name, steps): a step is (request, note) where note is None (both servers answer alike) or
# (mnemod's reply = 1.6.45's, "1.6.38 differs: ...", 1.6.38's reply). "{cas}" in a request is
# the last server-chosen CAS this connection saw.
CASES = [
    ("ms E sets the CAS", [
        (b"ms e1 2 E973\r\nhi\r\n", None), (b"mg e1 c v\r\n", None),
        (b"ms e1 2 E974 c\r\nho\r\n", None), (b"mg e1 c\r\n", None)]),
    ("ms E with C: compared against the CAS E gave", [
        (b"ms e2 1 E300\r\na\r\n", None), (b"ms e2 1 C300 E400 c\r\nb\r\n", None),
        (b"ms e2 1 C300 E500\r\nc\r\n", None), (b"mg e2 v c\r\n", None)]),
    ("ms E in add, replace, append and prepend", [
        (b"ms e3 1 ME E100 c\r\na\r\n", None), (b"ms e3 1 MR E200 c\r\nb\r\n", None),
        (b"ms e3 1 MA E300 c s\r\nc\r\n", None), (b"ms e3 1 MP E400 c s\r\nd\r\n", None),
        (b"mg e3 v c\r\n", None)]),
    ("ms E, bad token", [(b"ms e4 1 Ex\r\na\r\n", None), (b"ms e4 1 E\r\na\r\n", None)]),
    ("mg C: HD when the CAS matches, the value when it does not", [
        (b"ms c1 2 c\r\nhi\r\n", None),
        (b"mg c1 C{cas} v c\r\n", (b"HD c#\r\n", "1.6.38 differs: it ignores C and sends the value",
                                   b"VA 2 c#\r\nhi\r\n")),
        (b"mg c1 C1 v c\r\n", None), (b"mg c1 C{cas} c\r\n", None), (b"mg missing C5 v\r\n", None)]),
    ("mg C with T: the TTL is updated whether or not the CAS matches", [
        (b"ms c2 2 T100 c\r\nhi\r\n", None),
        (b"mg c2 C{cas} T300 v t\r\n", (b"HD t300\r\n", "1.6.38 differs: it ignores C and sends the value",
                                        b"VA 2 t300\r\nhi\r\n")),
        (b"mg c2 t\r\n", None), (b"mg c2 C7 T200 v t\r\n", None)]),
    ("mg C with E 973", [
        (b"ms c3 2 E973\r\nhi\r\n", None),
        (b"mg c3 C973 v c s f\r\n", (b"HD c973 s2 f0\r\n", "1.6.38 differs: it ignores C and sends the value",
                                     b"VA 2 c973 s2 f0\r\nhi\r\n"))]),
    ("mg E with N: the vivified placeholder takes the CAS", [
        (b"mg v1 N30 E55 c v t\r\n", None), (b"mg v1 c v\r\n", None),
        (b"mg v2 E55 c v\r\n", None), (b"ms v3 1\r\nx\r\n", None), (b"mg v3 N30 E55 c\r\n", None)]),
    ("md x: empty value, item kept", [
        (b"ms x1 2 F5 T100 E973\r\nhi\r\n", None), (b"md x1 x\r\n", None), (b"mg x1 v c f t h\r\n", None),
        (b"md x2 x\r\n", None), (b"md x2 x q\r\n", None)]),
    ("md x with T, F, E, C", [
        (b"ms x3 2 E300\r\nhi\r\n", None), (b"md x3 x T50 F3\r\n", None), (b"mg x3 v c f t\r\n", None),
        (b"md x3 x E400 C1\r\n", None), (b"md x3 x E400 C300\r\n", None), (b"mg x3 c\r\n", None)]),
    ("md x with I: a stale tombstone", [
        (b"ms x4 2 T100\r\nhi\r\n", None), (b"md x4 x I\r\n", None), (b"mg x4 v c t\r\n", None),
        (b"mg x4 v\r\n", None), (b"ms x5 2\r\nhi\r\n", None), (b"md x5 x I E77 T30\r\n", None),
        (b"mg x5 v c t\r\n", None)]),
    ("md I with E", [(b"ms i1 2\r\nhi\r\n", None), (b"md i1 I E200\r\n", None), (b"mg i1 c v\r\n", None)]),
    ("md E alone deletes", [(b"ms d1 2\r\nhi\r\n", None), (b"md d1 E200\r\n", None), (b"mg d1 v\r\n", None)]),
    ("ms s", [
        (b"ms s1 3 s\r\nabc\r\n", None), (b"ms s1 2 MA s\r\nde\r\n", None), (b"ms s1 1 MP s c\r\nz\r\n", None),
        (b"mg s1 v s\r\n", None), (b"ms s2 2 MA s\r\nxy\r\n", None), (b"ms s1 4 ME s\r\nabcd\r\n", None),
        (b"ms s1 2 s q\r\nhi\r\n", None), (b"ms s3 0 s\r\n\r\n", None)]),
    ("ms MA N: append creates a missing item with N's TTL", [
        (b"ms n1 2 MA N30\r\nxy\r\n", None), (b"mg n1 v t f\r\n", None), (b"ms n1 2 MA N30 s\r\nzz\r\n", None),
        (b"mg n1 v t\r\n", None), (b"ms n2 2 MP N0 F9 T100 s c\r\nab\r\n", None), (b"mg n2 v t f\r\n", None)]),
    ("ms MA with C", [
        (b"ms a1 1 c\r\na\r\n", None), (b"ms a1 1 MA C1\r\nb\r\n", None), (b"ms a1 1 MA C{cas} s\r\nb\r\n", None),
        (b"mg a1 v\r\n", None), (b"ms a2 1 MA C5\r\nb\r\n", None), (b"ms a3 1 MA C5 N30\r\nb\r\n", None),
        (b"mg a3 v\r\n", None)]),
    ("ms MR with C is a cas", [
        (b"ms r1 1 MR C5\r\na\r\n", None), (b"ms r1 1 c\r\na\r\n", None), (b"ms r1 1 MR C1\r\nb\r\n", None),
        (b"ms r1 1 MR C{cas}\r\nb\r\n", None), (b"mg r1 v\r\n", None)]),
    ("ma E", [
        (b"ma m1 N0 J5 E100 c v\r\n", None), (b"ma m1 E200 c v\r\n", None), (b"mg m1 c v\r\n", None),
        (b"ma m1 C200 E300 c v\r\n", None), (b"ma m1 C1 E400 c\r\n", None), (b"ma m2 E100\r\n", None)]),
    ("x is known to every meta command", [
        (b"ms k1 1 x\r\na\r\n", None), (b"mg k1 x v\r\n", None), (b"ma k1 x\r\n", None),
        (b"mg k1 v x v\r\n", None),
        (b"md k1 x x\r\n", (b"CLIENT_ERROR duplicate flag\r\n", "1.6.38 differs: md words every flag error alike",
                             b"CLIENT_ERROR invalid or duplicate flag\r\n"))]),
    ("M: the byte after M", [
        (b"ms m3 1 MSS\r\nx\r\n", (b"HD\r\n", "1.6.38 differs: it refuses an M token of other than one letter",
                                   b"CLIENT_ERROR incorrect length for M token\r\n")),
        (b"ms m3 1 M\r\nx\r\n", (b"CLIENT_ERROR invalid mode for ms M token\r\n",
                                 "1.6.38 differs: it refuses an M token of other than one letter",
                                 b"CLIENT_ERROR incorrect length for M token\r\n")),
        (b"ma m4 M\r\n", (b"CLIENT_ERROR invalid mode for ma M token\r\n",
                          "1.6.38 differs: ma words every flag error alike",
                          b"CLIENT_ERROR invalid or duplicate flag\r\n")),
        (b"ma m4 MII N0 v\r\n", (b"VA 1\r\n0\r\n", "1.6.38 differs: it refuses an M token of other than one letter",
                                 b"CLIENT_ERROR invalid or duplicate flag\r\n")),
        (b"mg m4 M v\r\n", (b"VA 1\r\n0\r\n", "1.6.38 differs: it refuses an M token of other than one letter",
                            b"CLIENT_ERROR incorrect length for M token\r\n"))]),
]


def reply_of(sock, req):
    """The reply to `req`: everything before the MN of an mn sent after it."""
    got = roundtrip(sock, req + b"mn\r\n", b"MN\r\n")
    return got[:-len(b"MN\r\n")]


@pytest.fixture(scope="module")
def servers():
    started = [Server("mnemod"), Server("memcached-new")]
    yield started
    for s in started:
        s.stop()


def converse(server, steps):
    """Each step's raw reply, with `{cas}` filled from the last c token seen."""
    replies = []
    last_cas = b"0"
    with server.connect() as sock:
        for req, _ in steps:
            got = reply_of(sock, req.replace(b"{cas}", last_cas))
            found = [c for c in CAS.findall(got) if c.decode() not in CHOSEN]
            if found:
                last_cas = found[-1]
            replies.append(got)
    return replies


@pytest.mark.parametrize("name,steps", CASES, ids=[c[0] for c in CASES])
def test_meta_flag(servers, name, steps):
    mnemod, memcached = servers
    mine = converse(mnemod, steps)
    theirs = converse(memcached, steps)
    for (req, note), a, b in zip(steps, mine, theirs):
        a, b = normalise(a), normalise(b)
        if note is None:
            assert a == b, f"{name}: {req!r}: mnemod {a!r}, memcached 1.6.38 {b!r}"
        else:
            want_145, why, want_138 = note
            assert a == want_145, f"{name}: {req!r}: mnemod {a!r}, 1.6.45 documents {want_145!r}"
            assert b == want_138, f"{name}: {req!r} ({why}): 1.6.38 said {b!r}"

"""A tiny binary-protocol codec for tests: build requests, read responses off a socket."""
import socket
import struct

HEADER = struct.Struct(">BBHBBHIIQ")
SENTINEL_OPAQUE = 0x5E471E1

OP = dict(
    GET=0x00, SET=0x01, ADD=0x02, REPLACE=0x03, DELETE=0x04, INCREMENT=0x05, DECREMENT=0x06,
    QUIT=0x07, FLUSH=0x08, GETQ=0x09, NOOP=0x0A, VERSION=0x0B, GETK=0x0C, GETKQ=0x0D,
    APPEND=0x0E, PREPEND=0x0F, STAT=0x10, SETQ=0x11, ADDQ=0x12, REPLACEQ=0x13, DELETEQ=0x14,
    INCREMENTQ=0x15, DECREMENTQ=0x16, QUITQ=0x17, FLUSHQ=0x18, APPENDQ=0x19, PREPENDQ=0x1A,
    VERBOSITY=0x1B, TOUCH=0x1C, GAT=0x1D, GATQ=0x1E, SASL_LIST_MECHS=0x20, SASL_AUTH=0x21,
    SASL_STEP=0x22, GATK=0x23, GATKQ=0x24,
)
OPNAME = {v: k for k, v in OP.items()}


def req(op, key=b"", value=b"", extras=b"", cas=0, opaque=0, magic=0x80,
        body_len=None, key_len=None, extras_len=None):
    """One request; the length fields can be forced to lie."""
    if isinstance(op, str):
        op = OP[op]
    bl = len(extras) + len(key) + len(value) if body_len is None else body_len
    kl = len(key) if key_len is None else key_len
    el = len(extras) if extras_len is None else extras_len
    return HEADER.pack(magic, op, kl, el, 0, 0, bl, opaque, cas) + extras + key + value


def store_extras(flags=0, exptime=0):
    return struct.pack(">II", flags, exptime)


def delta_extras(delta, initial=0, exptime=0):
    return struct.pack(">QQI", delta, initial, exptime)


def noop(opaque=SENTINEL_OPAQUE):
    return req("NOOP", opaque=opaque)


class Closed(Exception):
    pass


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        d = sock.recv(n - len(buf))
        if not d:
            raise Closed(buf)
        buf += d
    return buf


def read_response(sock):
    """One response as a dict; raises Closed at EOF."""
    h = recv_exact(sock, 24)
    magic, op, kl, el, dt, status, bl, opaque, cas = HEADER.unpack(h)
    body = recv_exact(sock, bl) if bl else b""
    return dict(magic=magic, op=op, status=status, opaque=opaque, cas=cas, datatype=dt,
                extras=body[:el], key=body[el:el + kl], value=body[el + kl:])


def converse(sock, data, sentinel=True):
    """Send `data` (plus a sentinel NOOP), read responses until the sentinel's answer or EOF.
    Returns (responses, closed)."""
    sock.sendall(data + (noop() if sentinel else b""))
    out = []
    while True:
        try:
            r = read_response(sock)
        except Closed as e:
            if e.args[0]:
                out.append(dict(partial=e.args[0]))
            return out, True
        except (ConnectionResetError, BrokenPipeError):
            return out, True
        if sentinel and r["op"] == OP["NOOP"] and r["opaque"] == SENTINEL_OPAQUE:
            return out, False
        out.append(r)


def connect(port, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s

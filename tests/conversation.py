"""Conversation tables: cases of steps (request bytes -> reply bytes), how they are written in
tests/tables/*.txt, how a step's reply is collected, and how replies are normalized.

Table format (one file may hold many cases):

    # a comment
    == name of the case | -C -I 2m        <- optional server flags after " | "
    > set k 0 0 1\\r\\nx\\r\\n                <- a step's request
    < STORED\\r\\n                          <- memcached's reply to it, as recorded
    > get k\\r\\n
    < VALUE k 0 1\\r\\nx\\r\\nEND\\r\\n

Requests and replies are written with Python bytes escapes (\\r \\n \\t \\xNN \\\\) plus one
extension: {N*TEXT} stands for TEXT repeated N times (a literal brace is written \\x7b / \\x7d).
A step written `>! ` is sent without the sentinel (a line without a newline, say); its reply is
what arrives until the server closes or stays quiet for a second.
A `<45 ` line after a `< ` line is memcached 1.6.45's reply where it differs from the recorded
release's (1.6.38; the 1.6.40 parser, the 1.6.43 dump OK): mnemod follows 1.6.45 and is checked
against it, the live 1.6.38 against the `< ` line. The recorder keeps these lines.
A reply may end in a marker: <CLOSED> (the server closed the connection; the next step opens a
new one), <TIMEOUT> (the sentinel got no answer: the server swallowed it as data), <QUIET> (a
`>! ` step's server kept the connection open) or <NOCONNECT> (no server to connect to). `< ` lines are written by
tests/record_tables.py from the real memcached; a case may leave them out.

A step is sent followed by the sentinel `version\\r\\n`; its reply is everything before the
sentinel's `VERSION ...\\r\\n` line.

The older one-line format `name | request` (tests/tables/meta.txt) is read as a one-step case.
"""
import codecs
import re
import socket
import subprocess

QUIET = 1.0  # seconds without a byte after which an unanswered sentinel counts as swallowed
RUN = re.compile(r"\{(\d+)\*([^{}]*)\}")


# --- the text form -----------------------------------------------------------------------------

def decode(text):
    """Table text -> bytes."""
    out = []
    pos = 0
    for m in RUN.finditer(text):
        out.append(codecs.escape_decode(text[pos:m.start()].encode())[0])
        out.append(codecs.escape_decode(m.group(2).encode())[0] * int(m.group(1)))
        pos = m.end()
    out.append(codecs.escape_decode(text[pos:].encode())[0])
    return b"".join(out)


def _esc(data):
    out = []
    for b in data:
        c = chr(b)
        if c == "\r":
            out.append("\\r")
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\\":
            out.append("\\\\")
        elif 0x20 <= b < 0x7f and c not in "{}":
            out.append(c)
        else:
            out.append("\\x%02x" % b)
    return "".join(out)


def encode(data, run=32):
    """Bytes -> table text; a unit of up to 64 bytes repeated to `run` or more bytes (at least
    3 times) becomes {N*unit}."""
    out = []
    i = lit = 0
    n = len(data)
    while i < n:
        best = None
        for size in range(1, 65):
            if i + 2 * size > n:
                break
            if data[i + size] != data[i]:
                continue
            unit = data[i:i + size]
            reps = 1
            while data[i + reps * size:i + (reps + 1) * size] == unit:
                reps += 1
            if reps >= 3 and reps * size >= run:
                best = (size, reps)
                break
        if best:
            size, reps = best
            out.append(_esc(data[lit:i]))
            out.append("{%d*%s}" % (reps, _esc(data[i:i + size])))
            i = lit = i + size * reps
        else:
            i += 1
    out.append(_esc(data[lit:]))
    return "".join(out)


class Case:
    def __init__(self, name, flags, steps, file, line):
        self.name = name
        self.flags = flags          # extra server flags, a list of str
        self.steps = steps          # list of [request bytes, recorded reply bytes or None]
        self.file = file
        self.line = line
        self.newer = {}             # step index -> memcached 1.6.45's reply (`<45 ` lines)

    @property
    def id(self):
        return f"{self.file}:{self.line}:{self.name}"


def load(path):
    """Read a table file: (recorded memcached version or None, [Case])."""
    text = path.read_text()
    lines = text.splitlines()
    version = None
    for raw in lines:
        m = re.match(r"#! recorded against memcached (\S+)", raw)
        if m:
            version = m.group(1)
    if not any(raw.startswith("== ") for raw in lines):
        return version, _load_oneline(path, lines)
    cases = []
    case = None
    for n, raw in enumerate(lines, 1):
        if raw.startswith("== "):
            title, _, flags = raw[3:].partition(" | ")
            case = Case(title.strip(), flags.split(), [], path.name, n)
            cases.append(case)
        elif raw.startswith("> "):
            case.steps.append([decode(raw[2:]), None, False])
        elif raw.startswith(">! "):
            case.steps.append([decode(raw[3:]), None, True])
        elif raw.startswith("<45 "):
            case.newer[len(case.steps) - 1] = decode(raw[4:])
        elif raw.startswith("< "):
            case.steps[-1][1] = decode(raw[2:])
        elif raw.strip() and not raw.startswith("#"):
            raise ValueError(f"{path.name}:{n}: cannot read {raw!r}")
    return version, cases


def _load_oneline(path, lines):
    cases = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        title, _, req = raw.partition(" | ")
        cases.append(Case(title.strip(), [], [[codecs.escape_decode(req.encode())[0], None, False]], path.name, n))
    return cases


def save(path, version, cases, header):
    """Write cases back (used by the recorder): header comments, then each case."""
    out = [h for h in header if not h.startswith("#! recorded")]
    out.append(f"#! recorded against memcached {version}")
    for case in cases:
        out.append("")
        out.append("== " + case.name + (" | " + " ".join(case.flags) if case.flags else ""))
        for i, (req, rep, bare) in enumerate(case.steps):
            out.append((">! " if bare else "> ") + encode(req, run=64))
            if rep is not None:
                out.append("< " + encode(rep))
            if i in case.newer:
                out.append("<45 " + encode(case.newer[i]))
    path.write_text("\n".join(out) + "\n")


# --- running a case --------------------------------------------------------------------------------

def _sentinels_in(req):
    return len(re.findall(rb"(?:^|\n)version\r?\n", req))


def step(sock, req, quiet=QUIET):
    """Send one step and its sentinel; return the reply before the sentinel's VERSION line."""
    try:
        sock.sendall(req + b"version\r\n")
    except (BrokenPipeError, ConnectionResetError):
        return b"<CLOSED>"
    want = _sentinels_in(req) + 1
    buf = b""
    sock.settimeout(quiet)
    while True:
        if buf.endswith(b"\r\n"):
            lines = buf.split(b"\r\n")
            if lines[-2].startswith(b"VERSION ") and sum(l.startswith(b"VERSION ") for l in lines) >= want:
                return buf[:buf.rfind(b"VERSION ", 0, len(buf) - 2)]
        try:
            d = sock.recv(1 << 20)
        except socket.timeout:
            return buf + b"<TIMEOUT>"
        except ConnectionResetError:
            d = b""
        if not d:
            return buf + b"<CLOSED>"
        buf += d


CAS_REF = re.compile(rb"%c(\d+)%")


def step_bare(sock, req, quiet=QUIET):
    """Send a step without a sentinel; read until the server closes or is quiet (<QUIET>)."""
    buf = b""
    try:
        sock.sendall(req)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server closed while we were sending: collect what it said
    sock.settimeout(quiet)
    while True:
        try:
            d = sock.recv(1 << 20)
        except socket.timeout:
            return buf + b"<QUIET>"
        except ConnectionResetError:
            d = b""
        if not d:
            return buf + b"<CLOSED>"
        buf += d


def run_case(server, case):
    """Run every step of `case` against `server`: the list of raw replies.

    A request may name a CAS value the server sent earlier in the case as %c1%, %c2%, ... (in
    order of first appearance, as the Normalizer numbers them): a table cannot know the
    numbers, and each server has its own."""
    replies = []
    sock = None
    norm = Normalizer()
    for req, _, bare in case.steps:
        names = {v: k for k, v in norm.cas.items()}
        req = CAS_REF.sub(lambda m: names.get(b"c" + m.group(1), b"<unknown-cas>"), req)
        if sock is None:
            try:
                sock = server.connect()
            except OSError:
                replies.append(b"<NOCONNECT>")
                continue
        rep = step_bare(sock, req) if bare else step(sock, req)
        norm(rep)
        replies.append(rep)
        if rep.endswith(b"<CLOSED>"):
            sock.close()
            sock = None
            if req.startswith(b"shutdown"):
                # A server told to shut down must exit; waiting for it keeps the next step
                # from racing its exit.
                try:
                    server.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    replies[-1] += b"<STILL RUNNING>"
    if sock is not None:
        sock.close()
    return replies


# --- normalization -----------------------------------------------------------------------------

class Normalizer:
    """What cannot be equal between two servers: STAT values and CAS numbers. CAS numbers are
    renamed c1, c2, ... in order of first appearance within a case, so whether two CAS values
    are equal is still compared. The version string is compared as it is (mnemod answers
    memcached's, since clients parse it)."""

    def __init__(self):
        self.cas = {}

    def _cas(self, m):
        if m.group(2) == b"0":
            return m.group(0)  # "no CAS" (-C) is compared as it is
        name = self.cas.setdefault(m.group(2), b"c%d" % (len(self.cas) + 1))
        return m.group(1) + name

    def __call__(self, reply):
        reply = re.sub(rb"(?m)^STAT (\S+) [^\r\n]*", rb"STAT \1 <n>", reply)
        reply = re.sub(rb"(?m)^(VALUE \S+ \d+ \d+ )(\d+)", self._cas, reply)
        # meta replies: the c flag and the cas= of `me`
        reply = re.sub(rb"(?m)^((?:VA \d+|HD|OK|EX|NF|NS)(?: [^\r\n]*?)? c)(\d+)", self._cas, reply)
        reply = re.sub(rb"(cas=)(\d+)", self._cas, reply)
        return reply


def normalize_all(replies):
    norm = Normalizer()
    return [norm(r) for r in replies]


def show(data, limit=400):
    text = encode(data)
    return text if len(text) <= limit else text[:limit] + f"... ({len(data)} bytes)"


def diff_report(case, want, got, want_label="memcached", got_label="mnemod"):
    """A readable report of the first differing step, then the whole conversation."""
    lines = [f"case {case.id}" + (f"  (flags: {' '.join(case.flags)})" if case.flags else "")]
    first = next(i for i, (a, b) in enumerate(zip(want, got)) if a != b)
    for i, (req, _, _) in enumerate(case.steps):
        mark = "!!" if i == first else "  "
        lines.append(f"{mark} step {i + 1}  > {show(req)}")
        lines.append(f"{mark}   {want_label:>10}: {show(want[i])}")
        if want[i] != got[i]:
            lines.append(f"{mark}   {got_label:>10}: {show(got[i])}")
    return "\n".join(lines)


"""The fault model of issue 47: random operations against one mnemod, random faults between
(and in the middle of) them, and a model of what the server acknowledged, checked after every
restart against the rule "a cache may forget, never lie": a key is absent, or holds the last
value acknowledged for it, or one a write whose acknowledgement a fault cut off would have
produced. Never a value older than that, a deleted or flushed key's value, or a value of
another instance.

    burst     several clients, one connection each, each owning its keys (so a key's history
              is sequential): set/append/prepend/delete/touch/get/mg on string keys, incr/decr/
              set on counters; each client's requests pipelined; flush_all as a barrier
    fault     kill -9 (maybe with requests in flight), SIGINT, SIGTERM, `shutdown` (-A);
              restart with other flags (-m, -e on/off, flash on/off); while down, damage the
              snapshot, the flash file or FILE.entries (flipped bytes, cut short, deleted);
              an operator slip: a second mnemod on the -e or flash file (direct, through a
              symlink, after deleting FILE.lock) must refuse while the first keeps serving
    check     every key read back (get, mg for some) and compared with the model

The model keeps, per key, the set of values the server may hold (None = absent, which is
always allowed: a cache may forget). An acknowledged write makes it exact; a write in flight
when a fault struck adds what it would have produced. A read that is allowed makes it exact
again (what was read is now the server's state).

Used by tests/test_fault_model.py (bounded, in the test command) and bench/faults.sh (long).
Every failure message carries the seed, the configuration, the faults and the failing keys'
histories."""
import collections
import dataclasses
import os
import pathlib
import random
import signal
import socket
import subprocess
import tempfile
import time

from servers import MNEMOD, Server, free_port, stats

U64 = (1 << 64) - 1
TAG = b"A"  # this instance's values; an intruder writes INTRUDER's
INTRUDER = b"B"
REPLY_TIMEOUT = 60.0  # a hang detector, not a timing (debug build, loaded machine)


class Violation(AssertionError):
    pass


class Closed(Exception):
    """The server closed the connection (or reset it) before the reply was complete."""


@dataclasses.dataclass(frozen=True)
class Flags:
    e: bool = False
    flash: bool = False
    m: int = 16
    flash_mb: int = 32
    threads: int = 2

    def label(self):
        return (f"-m {self.m} -t {self.threads}" + (" -e" if self.e else "")
                + (f" flash:{self.flash_mb}m" if self.flash else ""))


@dataclasses.dataclass
class Config:
    name: str
    flags: Flags
    # Flag sets a "restart with other flags" picks from (the base flags are always among them).
    variants: tuple = ()
    faults: dict = dataclasses.field(default_factory=dict)  # kind -> weight
    clients: int = 4
    str_keys: int = 60  # per client
    ctr_keys: int = 10  # per client
    large: bool = False  # values of 1-8 KB (to flash with ext_item_size=512)
    # A start without -e (without the flash tier) cannot know the snapshot (FILE.entries) it
    # leaves behind, and a later start with it restores that stale file. False: the operator
    # removes what a start no longer uses; True: left in place (bench only; see docs/testing.md).
    orphans: bool = False


# --- connections and replies ------------------------------------------------------------------

class Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def send(self, data):
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise Closed(str(e))

    def _fill(self):
        try:
            d = self.sock.recv(1 << 20)
        except (ConnectionResetError, BrokenPipeError) as e:
            raise Closed(str(e))
        except socket.timeout:
            raise TimeoutError("no reply within %d s" % REPLY_TIMEOUT)
        if not d:
            raise Closed("eof")
        self.buf += d

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        ln, _, self.buf = self.buf.partition(b"\r\n")
        return ln

    def exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def close(self):
        self.sock.close()


# --- the model --------------------------------------------------------------------------------

@dataclasses.dataclass
class Op:
    kind: str  # set append prepend delete touch incr decr get mg flush
    key: bytes = b""
    data: bytes = b""  # set: the value; append/prepend: the piece
    n: int = 0  # incr/decr
    step: int = 0

    def request(self):
        k = self.key
        if self.kind in ("set", "append", "prepend"):
            return b"%s %s 0 0 %d\r\n%s\r\n" % (self.kind.encode(), k, len(self.data), self.data)
        if self.kind == "delete":
            return b"delete %s\r\n" % k
        if self.kind == "touch":
            return b"touch %s 0\r\n" % k
        if self.kind in ("incr", "decr"):
            return b"%s %s %d\r\n" % (self.kind.encode(), k, self.n)
        if self.kind == "get":
            return b"get %s\r\n" % k
        if self.kind == "mg":
            return b"mg %s v\r\n" % k
        if self.kind == "flush":
            return b"flush_all\r\n"
        raise ValueError(self.kind)

    def read_reply(self, c):
        """The reply: a status line, or for reads the value (None for a miss)."""
        if self.kind == "get":
            ln = c.line()
            if ln == b"END":
                return None
            head = ln.split()
            if head[0] != b"VALUE" or head[1] != self.key:
                raise Violation(f"get {self.key!r}: reply {ln!r}")
            v = c.exact(int(head[3]))
            if c.line() != b"END":
                raise Violation(f"get {self.key!r}: no END")
            return v
        if self.kind == "mg":
            ln = c.line()
            if ln == b"EN":
                return None
            head = ln.split()
            if head[0] != b"VA":
                raise Violation(f"mg {self.key!r}: reply {ln!r}")
            return c.exact(int(head[1]))
        return c.line()

    def describe(self):
        if self.kind in ("set", "append", "prepend"):
            return f"{self.kind} {short(self.data)}"
        if self.kind in ("incr", "decr"):
            return f"{self.kind} {self.n}"
        return self.kind


def short(v):
    if v is None or len(v) <= 40:
        return "(absent)" if v is None else repr(v)
    return f"{v.split(b'#', 1)[0][:40]!r}...({len(v)} B, {v.count(b'+')} appends)"


def counter(v):
    """A counter's value as stored: memcached pads an in-place incr/decr with spaces."""
    try:
        return int(v.rstrip(b" "))
    except ValueError:
        return None


def outcome(op, v, ctr):
    """What `op` makes of the value `v` (None: absent) if it succeeds or fails on its own."""
    if op.kind == "set":
        return op.data
    if op.kind == "delete":
        return None
    if v is None:
        return None
    if op.kind == "append":
        return v + op.data
    if op.kind == "prepend":
        return op.data + v
    if op.kind in ("incr", "decr"):
        n = counter(v)
        if n is None:
            return v  # a CLIENT_ERROR leaves it alone
        r = (n + op.n) & U64 if op.kind == "incr" else max(0, n - op.n)
        return b"%d" % r
    return v  # touch, reads


class Key:
    __slots__ = ("name", "ctr", "cands", "hist", "ever", "missed")

    def __init__(self, name, ctr):
        self.name = name
        self.ctr = ctr
        self.cands = {None}
        self.hist = collections.deque(maxlen=40)
        self.ever = set()  # every value it was ever written or read with
        self.missed = False  # read as a miss since its last write (for the report only)

    def norm(self, v):
        return counter(v) if (self.ctr and v is not None) else v

    def allowed(self, v):
        if v is None:
            return True
        return self.norm(v) in {self.norm(c) for c in self.cands if c is not None}

    def note(self, step, text):
        self.hist.append(f"#{step} {text}")


# --- the engine -------------------------------------------------------------------------------

class Engine:
    def __init__(self, config, seed, budget, workdir=None, log=None):
        self.cfg = config
        self.seed = seed
        self.rng = random.Random(f"{seed}:{config.name}")
        self.budget = budget
        self.tmp = None
        if workdir is None:
            self.tmp = tempfile.TemporaryDirectory(prefix=f"mnemo-faults-{config.name}-")
            workdir = self.tmp.name
        self.dir = pathlib.Path(workdir)
        self.snap = self.dir / "snap"
        self.flash = self.dir / "flash"
        self.entries = self.dir / "flash.entries"
        self.log = log or (lambda line: None)
        self.step = 0
        self.seq = 0
        self.events = collections.deque(maxlen=60)
        self.counts = collections.Counter()
        self.flags = config.flags
        self.srv = None
        self.conns = []
        self.keys = {}
        self.owned = []  # per client: its keys
        for c in range(config.clients):
            mine = [Key(b"s%d:%d" % (c, i), False) for i in range(config.str_keys)]
            mine += [Key(b"c%d:%d" % (c, i), True) for i in range(config.ctr_keys)]
            self.owned.append(mine)
            for k in mine:
                self.keys[k.name] = k

    # -- process control --

    def argv(self, flags):
        a = ["-A", "-m", str(flags.m), "-t", str(flags.threads)]
        if flags.e:
            a += ["-e", str(self.snap)]
        if flags.flash:
            a += ["-o", f"ext_page_size=2,ext_wbuf_size=2,ext_item_size=512,ext_item_age=1,"
                        f"ext_path={self.flash}:{flags.flash_mb}m"]
        return a

    def start(self):
        self.srv = Server("mnemod", *self.argv(self.flags))
        self.conns = [Conn(self.srv.connect(timeout=REPLY_TIMEOUT)) for _ in range(self.cfg.clients)]
        self.counts["starts"] += 1

    def drop_conns(self):
        for c in self.conns:
            c.close()
        self.conns = []

    def wait_exit(self, how):
        try:
            rc = self.srv.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.fail(f"mnemod did not exit within 120 s of {how}")
        self.event(f"{how}: exited {rc}")
        return rc

    def stderr_tail(self, n=12):
        if self.srv is None:
            return ""
        try:
            return "\n".join(self.srv.stderr().splitlines()[-n:])
        except ValueError:
            return ""

    def close_server(self):
        if self.srv is not None:
            self.last_stderr = self.stderr_tail()
            self.srv.stop()
            self.srv = None

    def event(self, text):
        self.events.append(f"#{self.step} {text}")
        self.log(f"[{self.cfg.name} seed={self.seed}] #{self.step} {text}")

    # -- values --

    def value(self, key, tag=TAG):
        self.seq += 1
        head = b"%s|%s|%d#" % (tag, key, self.seq)
        if self.cfg.large and self.rng.random() < 0.6:
            n = self.rng.randint(1024, 8192)
        else:
            n = self.rng.randint(len(head), 300)
        return (head * (n // len(head) + 1))[:max(n, len(head))]

    def pick_op(self, key):
        r = self.rng.random()
        self.step += 1
        if key.ctr:
            if r < 0.15:
                return Op("set", key.name, b"%d" % self.rng.randint(0, 10**6), step=self.step)
            if r < 0.55:
                return Op("incr", key.name, n=self.rng.randint(1, 1000), step=self.step)
            if r < 0.8:
                return Op("decr", key.name, n=self.rng.randint(1, 1000), step=self.step)
            return Op(self.rng.choice(["get", "mg"]), key.name, step=self.step)
        big = any(c is not None and len(c) > 16000 for c in key.cands)
        if r < 0.35 or (big and r < 0.6):
            return Op("set", key.name, self.value(key.name), step=self.step)
        if r < 0.5:
            self.seq += 1
            return Op("append", key.name, b"+%s:%d" % (TAG, self.seq), step=self.step)
        if r < 0.58:
            self.seq += 1
            return Op("prepend", key.name, b"%s:%d+" % (TAG, self.seq), step=self.step)
        if r < 0.7:
            return Op("delete", key.name, step=self.step)
        if r < 0.78:
            return Op("touch", key.name, step=self.step)
        return Op(self.rng.choice(["get", "get", "mg"]), key.name, step=self.step)

    # -- applying replies to the model --

    def fail(self, what, keys=()):
        lines = [f"fault model: {what}",
                 f"seed {self.seed} (MNEMO_FAULT_SEED={self.seed}), configuration {self.cfg.name}: "
                 f"{self.cfg.flags.label()}, now {self.flags.label()}",
                 "recent events:"] + ["  " + e for e in list(self.events)[-25:]]
        for k in list(keys)[:3]:
            lines.append(f"history of {k.name!r} (may hold: {', '.join(short(c) for c in k.cands)}):")
            lines += ["  " + h for h in k.hist]
        tail = self.stderr_tail() or getattr(self, "last_stderr", "")
        if tail:
            lines += ["mnemod's stderr (last lines):"] + ["  " + x for x in tail.splitlines()]
        raise Violation("\n".join(lines))

    def classify(self, key, got):
        if got.startswith(INTRUDER + b"|"):
            return "another instance's value"
        if key.cands == {None}:
            return "a deleted or flushed key's value" if got in key.ever or key.ctr else "a value never written"
        if got in key.ever:
            return "a value older than the last acknowledged one"
        return "a value never written"

    def observe(self, key, got, where, step=None):
        """A value read from the server: allowed by the model, which it then becomes. A miss
        changes nothing: it acknowledges no write (the rule is about acknowledged writes), and
        a value kept by a restore may still come back after it."""
        self.counts["reads"] += 1
        wrong = not key.allowed(got)
        key.note(step or self.step, f"{where}: read {short(got)}{'  <-- WRONG' if wrong else ''}")
        key.missed = got is None
        if got is None:
            return
        if wrong:
            self.counts["wrong"] += 1
            self.fail(f"{where}: {key.name!r} holds {self.classify(key, got)}: {short(got)}", [key])
        key.cands = {got}
        key.ever.add(got)

    def acked(self, op, reply):
        key = self.keys[op.key]
        before = key.cands
        if op.kind in ("get", "mg"):
            self.observe(key, reply, f"{op.kind} (live)", op.step)
            return
        key.note(op.step, f"{op.describe()} -> {reply.decode(errors='replace')}")
        key.missed = reply in (b"NOT_STORED", b"NOT_FOUND")
        present = {v for v in before if v is not None}
        if op.kind == "set":
            if reply == b"STORED":
                key.cands = {op.data}
                key.ever.add(op.data)
            else:  # SERVER_ERROR out of memory: the old value or nothing
                self.counts["set_refused"] += 1
                key.cands = before | {None}
        elif op.kind in ("append", "prepend"):
            if reply == b"STORED":
                if not present:
                    self.fail(f"{op.kind} was STORED on {op.key!r}, which the model holds absent", [key])
                key.cands = {outcome(op, v, False) for v in present}
            elif reply == b"NOT_STORED":
                pass  # not found: no write, nothing acknowledged
            else:
                key.cands = before | {None}
        elif op.kind == "delete":
            if reply == b"DELETED" and not present:
                self.fail(f"delete found {op.key!r}, which the model holds absent", [key])
            key.cands = {None}
        elif op.kind == "touch":
            if reply == b"TOUCHED":
                if not present:
                    self.fail(f"touch found {op.key!r}, which the model holds absent", [key])
                key.cands = present
        elif op.kind in ("incr", "decr"):
            if reply == b"NOT_FOUND":
                pass
            else:
                want = {outcome(op, v, True) for v in present}
                if reply not in want:
                    self.counts["wrong"] += 1
                    self.fail(f"{op.kind} {op.n} on {op.key!r} replied {reply!r}; the model allows "
                              f"{sorted(want) or 'a miss'}", [key])
                key.cands = {reply}
        for v in key.cands:
            if v is not None:
                key.ever.add(v)

    def in_doubt(self, ops):
        """Requests sent and not answered when a fault struck: each may or may not have
        happened, in order (a prefix of a connection's requests ran)."""
        by_key = collections.defaultdict(list)
        for op in ops:
            if op.kind == "flush":
                for k in self.keys.values():
                    k.cands = k.cands | {None}
                    k.note(op.step, "flush_all cut off by the fault")
            elif op.kind not in ("get", "mg"):
                by_key[op.key].append(op)
        for name, kops in by_key.items():
            key = self.keys[name]
            states, cur = set(key.cands), set(key.cands)
            for op in kops:
                cur = {outcome(op, v, key.ctr) for v in cur}
                states |= cur
                key.note(op.step, f"{op.describe()} -> (cut off by the fault)")
            key.cands = states
            key.ever |= {v for v in states if v is not None}
            self.counts["in_doubt"] += len(kops)

    # -- bursts --

    def burst(self, cut=None):
        """Each client pipelines a few requests on its keys, then reads the replies. With `cut`
        (a function), the replies are read only in part and `cut()` strikes in between; what
        still arrives after it counts as acknowledged, the rest is in doubt."""
        plans = []
        for ci, c in enumerate(self.conns):
            ops = [self.pick_op(self.rng.choice(self.owned[ci])) for _ in range(self.rng.randint(1, 30))]
            c.send(b"".join(op.request() for op in ops))
            plans.append((c, ops))
            self.counts["ops"] += len(ops)
        if cut is not None:
            # Some replies first, then the fault, while requests are still in flight.
            for c, ops in plans:
                k = self.rng.randint(0, len(ops))
                while ops and k:
                    op = ops.pop(0)
                    self.acked(op, op.read_reply(c))
                    k -= 1
            cut()
        for c, ops in plans:
            while ops:
                op = ops[0]
                try:
                    reply = op.read_reply(c)
                except (Closed, TimeoutError):
                    if cut is None:
                        raise
                    break
                ops.pop(0)
                self.acked(op, reply)
        lost = [op for _, ops in plans for op in ops]
        if lost:
            self.in_doubt(lost)

    def flush_all(self):
        c = self.conns[0]
        self.step += 1
        c.send(b"flush_all\r\n")
        r = c.line()
        if r != b"OK":
            self.fail(f"flush_all replied {r!r}")
        for k in self.keys.values():
            k.cands = {None}
            k.note(self.step, "flush_all -> OK")
        self.event("flush_all")
        self.counts["flush_all"] += 1

    # -- checks --

    def check_all(self, where):
        """Reads every key (get in batches, mg for some) and checks it against the model."""
        c = Conn(self.srv.connect(timeout=REPLY_TIMEOUT))
        names = list(self.keys)
        self.rng.shuffle(names)
        present = 0
        try:
            for b in range(0, len(names), 50):
                chunk = names[b:b + 50]
                use_mg = [n for n in chunk if self.rng.random() < 0.2]
                use_get = [n for n in chunk if n not in use_mg]
                got = {}
                if use_get:
                    c.send(b"get " + b" ".join(use_get) + b"\r\n")
                    while True:
                        ln = c.line()
                        if ln == b"END":
                            break
                        head = ln.split()
                        if head[0] != b"VALUE" or head[1] not in use_get:
                            self.fail(f"{where}: get replied {ln[:80]!r}")
                        got[head[1]] = c.exact(int(head[3]))
                for n in use_mg:
                    c.send(b"mg %s v\r\n" % n)
                    got[n] = Op("mg", n).read_reply(c)
                for n in chunk:
                    v = got.get(n)
                    key = self.keys[n]
                    self.observe(key, v, where)
                    present += v is not None
                    self.counts["keys_checked"] += 1
        finally:
            c.close()
        return present

    def known_present(self):
        return sum(1 for k in self.keys.values() if None not in k.cands and not k.missed)

    # -- faults --

    def stop(self, kind, inflight):
        """Stops the server `kind`'s way; with `inflight`, in the middle of a burst."""
        proc = self.srv.proc
        graceful = kind in ("sigterm", "sigint", "shutdown")

        def strike():
            if kind.startswith("kill9"):
                proc.kill()
            elif kind == "sigterm":
                proc.send_signal(signal.SIGTERM)
            elif kind == "sigint":
                proc.send_signal(signal.SIGINT)
            elif kind == "shutdown":
                s = self.srv.connect(timeout=REPLY_TIMEOUT)
                s.sendall(b"shutdown\r\n")
                s.close()

        on_flash = ""
        if self.flags.flash:
            with self.srv.connect(timeout=REPLY_TIMEOUT) as s:
                n = int(stats(s).get("extstore_objects_used", "0"))
            self.counts["on_flash_at_faults"] += n
            on_flash = f", {n} items on flash"
        self.event(f"fault {kind}{' with requests in flight' if inflight else ''} "
                   f"({self.known_present()} keys known present{on_flash})")
        expected = self.known_present()
        if inflight:
            self.burst(cut=strike)
        else:
            strike()
        self.wait_exit(kind)
        self.drop_conns()
        self.counts[f"fault_{kind}"] += 1
        return graceful, expected

    def damage(self):
        targets = [p for p in (self.snap, self.flash, self.entries) if p.exists()]
        if not targets:
            return
        p = self.rng.choice(targets)
        how = self.rng.choice(["flip", "flip", "truncate", "delete"])
        size = p.stat().st_size
        if how == "delete" or size == 0:
            p.unlink()
        elif how == "truncate":
            os.truncate(p, self.rng.randint(0, size - 1))
        else:
            with open(p, "r+b") as f:
                # In the part written: flash is mostly empty beyond its first pages.
                span = min(size, 4 << 20) if p == self.flash else size
                for _ in range(self.rng.randint(1, 20)):
                    at = self.rng.randrange(span)
                    f.seek(at)
                    b = f.read(1)
                    f.seek(at)
                    f.write(bytes([b[0] ^ (1 << self.rng.randrange(8))]))
        self.counts[f"damage_{p.name}_{how}"] += 1
        self.event(f"damaged {p.name}: {how} (of {size} bytes)")

    def slip(self):
        """A second mnemod on this one's -e or flash file: it must refuse to start, and this one
        must keep serving its own values."""
        files = ([self.snap] if self.flags.e else []) + ([self.flash] if self.flags.flash else [])
        if not files:
            return
        target = self.rng.choice(files)
        how = self.rng.choice(["direct", "symlink", "lock deleted"])
        path = target
        if how == "symlink":
            path = self.dir / f"link-{self.step}-{target.name}"
            path.symlink_to(target)
        elif how == "lock deleted":
            lock = target.with_name(target.name + ".lock")
            if lock.exists():
                lock.unlink()
        flags = dataclasses.replace(self.flags, e=target == self.snap, flash=target == self.flash)
        argv = [a.replace(str(target), str(path)) for a in self.argv(flags)]
        port = free_port()
        cmd = [MNEMOD, "-p", str(port), "-l", "127.0.0.1", "-U", "0", *argv]
        self.event(f"slip: a second mnemod on {target.name} ({how})")
        self.counts[f"slip_{target.name}_{how.replace(' ', '_')}"] += 1
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        started = False
        while proc.poll() is None:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1)
                if s.getsockname() != s.getpeername():
                    started = True
                    s.close()
                    break
                s.close()
            except OSError:
                pass
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)  # polling a connect until the deadline
        if not started:
            try:
                rc = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.fail(f"slip ({target.name}, {how}): the second mnemod neither served nor exited")
            err = proc.stderr.read().decode(errors="replace").strip()
            if rc == 0:
                self.fail(f"slip ({target.name}, {how}): the second mnemod exited 0: {err}")
            self.event(f"slip refused (exit {rc}): {err[:160]}")
            self.check_all("after a refused slip")
            return
        self.counts["slip_started"] += 1
        # It started: write its values under this instance's key names, so that whatever it
        # does to the shared file shows, then stop it and look.
        with socket.create_connection(("127.0.0.1", port), timeout=REPLY_TIMEOUT) as s:
            c = Conn(s)
            names = [n for n in self.keys if n.startswith(b"s")]
            for n in names:
                v = (b"%s|%s|x#" % (INTRUDER, n)) * 400
                c.send(b"set %s 0 0 %d\r\n%s\r\n" % (n, len(v), v))
                c.line()
            c.send(b"get " + b" ".join(names[:50]) + b"\r\n")
            while c.line() != b"END":
                pass
            # Until its values are on flash (ext_item_age=1), if it has a flash tier.
            deadline = time.monotonic() + 10
            while flags.flash and time.monotonic() < deadline:
                st = stats(s)
                if int(st.get("extstore_objects_written", "0")) >= len(names) // 2 and st.get("extstore_io_queue") == "0":
                    break
                time.sleep(0.05)
        proc.kill()
        proc.wait()
        err = proc.stderr.read().decode(errors="replace").strip()
        try:
            self.check_all(f"after a second mnemod on {target.name} ({how})")
            what = "no wrong value seen yet"
        except Violation as v:
            what = str(v).splitlines()[0]
        self.fail(f"slip ({target.name}, {how}): a second mnemod started on the same file "
                  f"(it said: {err[:200]!r}); then {what}")

    # -- the run --

    def pick_fault(self):
        kinds = [k for k in self.cfg.faults if self.cfg.faults[k] > 0]
        return self.rng.choices(kinds, [self.cfg.faults[k] for k in kinds])[0]

    def restart(self, flags, why):
        self.flags = flags
        self.start()
        present = self.check_all(f"after {why}")
        self.counts["restarts"] += 1
        self.counts[f"restart_{why.split()[0]}"] += 1
        return present

    def run(self):
        """Runs bursts and faults until the budget is spent; returns the counts."""
        started = time.monotonic()
        self.event(f"start: {self.flags.label()}")
        try:
            self.start()
            # At least two faults, however slow the machine: a run that checked nothing passes nothing.
            while self.counts["restarts"] < 2 or time.monotonic() - started < self.budget:
                for _ in range(self.rng.randint(1, 6)):
                    self.burst()
                    if self.rng.random() < 0.05:
                        self.flush_all()
                flush = self.rng.random() < 0.15  # right before the fault: nothing read since
                if self.flags.flash and (flush or self.rng.random() < 0.4):
                    self.wait_flash()
                if flush:
                    self.flush_all()
                kind = self.pick_fault()
                if kind == "slip":
                    self.slip()
                    continue
                if kind == "damage":
                    # Damage needs the server down: stop it one of the ways first.
                    stop_kind = self.rng.choice(["kill9", "sigterm", "sigint", "shutdown"])
                else:
                    stop_kind = "kill9" if kind in ("flags", "kill9_inflight") else kind
                inflight = kind == "kill9_inflight" or (kind != "damage" and self.rng.random() < 0.3)
                graceful, expected = self.stop(stop_kind, inflight)
                self.close_server()
                flags = self.flags
                if kind == "damage":
                    self.damage()
                if kind == "flags" or self.rng.random() < 0.15:
                    flags = self.rng.choice([self.cfg.flags, *self.cfg.variants])
                    if flags != self.flags:
                        self.event(f"restart with other flags: {flags.label()}")
                        self.counts["flag_changes"] += 1
                for unused, path in ((not flags.e, self.snap), (not flags.flash, self.entries)):
                    if unused and path.exists() and not self.cfg.orphans:
                        path.unlink()
                        self.event(f"removed {path.name}, which this start does not use")
                old = self.flags
                present = self.restart(flags, f"{stop_kind}{' +damage' if kind == 'damage' else ''}")
                self.event(f"restarted ({flags.label()}): {present} keys present, none wrong")
                if graceful and old.e and kind != "damage" and flags == old:
                    self.counts["graceful_known"] += expected
                    self.counts["graceful_back"] += present
                    self.counts[f"back_{stop_kind}"] += present
                    self.counts[f"known_{stop_kind}"] += expected
        except (Closed, TimeoutError, RuntimeError, OSError) as e:
            self.fail(f"the run stopped: {e!r}")
        finally:
            self.drop_conns()
            self.close_server()
            if self.tmp is not None:
                self.tmp.cleanup()
        self.counts["seconds"] = int(time.monotonic() - started)
        return self.counts

    def wait_flash(self):
        """Until the idle large values went to flash (ext_item_age=1) and the writer is idle,
        with a deadline: not what is checked, only a way to have faults hit flashed values."""
        with self.srv.connect(timeout=REPLY_TIMEOUT) as s:
            before = int(stats(s).get("extstore_objects_written", "0"))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                st = stats(s)
                if int(st.get("extstore_objects_written", "0")) > before and st.get("extstore_io_queue") == "0":
                    self.counts["flash_waits"] += 1
                    return
                time.sleep(0.05)


def configurations():
    """The configurations the bounded test and the bench run."""
    plain, e, fl = Flags(m=16), Flags(e=True, m=16), Flags(flash=True, m=8)
    efl = Flags(e=True, flash=True, m=8)
    stops = {"kill9": 3, "kill9_inflight": 3, "sigint": 2, "sigterm": 3, "shutdown": 2}
    return [
        Config("e", e, variants=(dataclasses.replace(e, m=8), dataclasses.replace(e, m=64, threads=4)),
               faults={**stops, "damage": 2, "slip": 1, "flags": 1}),
        Config("flash", fl, variants=(dataclasses.replace(fl, m=16), dataclasses.replace(fl, threads=4)),
               faults={**stops, "damage": 2, "slip": 1, "flags": 1}, large=True),
        Config("e+flash", efl, variants=(dataclasses.replace(efl, m=16), dataclasses.replace(efl, threads=4)),
               faults={**stops, "damage": 2, "slip": 1, "flags": 1}, large=True),
        # Restarts that add or leave out -e and the flash tier, between all four.
        Config("mixed", plain, variants=(e, fl, efl), faults={**stops, "damage": 1, "flags": 4}, large=True),
    ]


def bench_configurations():
    """The bench's: the test's, and `mixed` with the files a start leaves out kept in place."""
    mixed = [c for c in configurations() if c.name == "mixed"][0]
    return configurations() + [dataclasses.replace(mixed, name="mixed-orphans", orphans=True)]

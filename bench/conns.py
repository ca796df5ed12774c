#!/usr/bin/env python3
"""Memory per idle connection, and what comes back after waves of them (issue 36, item 2).

Each server is started afresh (`-m 64 -t 4 -c 20000`), served once by 100 short connections
(so every worker has allocated what serving anything allocates), and its RSS read: the level
before. Then WAVES times: N connections open and sit idle (one round trip on the last, so all
were accepted), RSS is read (the cost per connection), they close, and once the servers' idle
sweeps have run (SETTLE seconds) RSS is read again (what came back).

    python3 bench/conns.py                      # mnemod (both loops) and memcached
    N=10000 WAVES=3 SETTLE=7 python3 bench/conns.py

Needs `ulimit -n` above N + 100 (the script raises its soft limit to the hard one).
MNEMOD (default target/release/mnemod) and MEMCACHED (default memcached on PATH) name the
binaries. Prints a Markdown table.
"""
import os
import resource
import shutil
import socket
import subprocess
import time

N = int(os.environ.get("N", "10000"))
WAVES = int(os.environ.get("WAVES", "3"))
SETTLE = float(os.environ.get("SETTLE", "7"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MNEMOD = os.environ.get("MNEMOD", os.path.join(ROOT, "target/release/mnemod"))
MEMCACHED = os.environ.get("MEMCACHED", shutil.which("memcached") or "/usr/bin/memcached")


def raise_fd_limit():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < N + 200:
        raise SystemExit(f"ulimit -n is {hard}; N={N} needs {N + 200}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def connect(port, attempts=1):
    for i in range(attempts):
        try:
            return socket.create_connection(("127.0.0.1", port))
        except OSError:
            if i + 1 == attempts:
                raise
            time.sleep(0.02)


def roundtrip(s, req, end):
    s.sendall(req)
    got = b""
    while not got.endswith(end):
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError(f"closed after {got!r}")
        got += chunk
    return got


def measure(name, argv):
    port = free_port()
    proc = subprocess.Popen(argv + ["-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", "64",
                                    "-t", "4", "-c", str(N + 1000)])
    try:
        connect(port, attempts=500).close()
        warm = [connect(port) for _ in range(100)]
        for s in warm:
            roundtrip(s, b"set k 0 0 1\r\nv\r\nget k\r\n", b"END\r\n")
            s.close()
        time.sleep(SETTLE)
        before = rss_kb(proc.pid)
        rows = []
        for wave in range(WAVES):
            conns = [connect(port, attempts=50) for _ in range(N)]
            roundtrip(conns[-1], b"version\r\n", b"\r\n")
            time.sleep(1.5)
            opened = rss_kb(proc.pid)
            for s in conns:
                s.close()
            time.sleep(SETTLE)
            with connect(port) as s:
                roundtrip(s, b"version\r\n", b"\r\n")
            after = rss_kb(proc.pid)
            rows.append((wave + 1, before, opened, after))
        return name, rows
    finally:
        proc.kill()
        proc.wait()


def main():
    raise_fd_limit()
    user = ["-u", "root"] if os.geteuid() == 0 else []
    servers = [("mnemod (io_uring)", [MNEMOD]), ("mnemod (epoll)", [MNEMOD, "--io-loop=epoll"]),
               ("memcached", [MEMCACHED] + user)]
    print(f"{N} idle connections per wave, {WAVES} waves, RSS read {SETTLE:g} s after the closes\n")
    print("| server | wave | RSS before (KiB) | RSS open (KiB) | bytes per connection | RSS after close (KiB) | after / before |")
    print("|---|---|---|---|---|---|---|")
    for name, argv in servers:
        name, rows = measure(name, argv)
        for wave, before, opened, after in rows:
            per = (opened - before) * 1024 / N
            print(f"| {name} | {wave} | {before:,} | {opened:,} | {per:,.0f} | {after:,} | {after / before:.2f} |")


if __name__ == "__main__":
    main()

"""The Debian package (scripts/package.sh), installed with dpkg beside memcached's package.

Run by scripts/test.sh with MNEMO_DEB naming the built .deb (root: dpkg installs it):
    MNEMO_DEB=target/debian/mnemo_0.1.0-1_amd64.deb .venv/bin/python -m pytest tests/package_check.py

It checks the files, the memcache user and the pid directory, then runs what the unit runs
(its ExecStart, with a test config in /etc/memcached.conf's place: systemd itself may not
run here) and talks to the server; a flag mnemod refuses stops the start naming its line;
`systemd-analyze verify` accepts the unit where systemd-analyze exists. Last, the package
is removed and memcached's package is untouched (the last test). Not named test_*.py: the plain `pytest
tests` run does not pick it up without a package to check.
"""
import os
import pathlib
import pwd
import shlex
import shutil
import socket
import subprocess
import time

import pytest

from servers import START_DEADLINE, free_port, roundtrip

DEB = os.environ.get("MNEMO_DEB")
UNIT = pathlib.Path("/lib/systemd/system/mnemo.service")
FILES = {
    "/usr/bin/mnemod": 0o755,
    "/usr/bin/mnemo": 0o755,
    "/lib/systemd/system/mnemo.service": 0o644,
    "/usr/lib/mnemo/mnemod-wrapper": 0o755,
    "/usr/lib/tmpfiles.d/mnemo.conf": 0o644,
    "/usr/share/mnemo/memcached.conf.default": 0o644,
    "/usr/share/man/man1/mnemod.1.gz": 0o644,
    "/usr/share/man/man1/mnemo.1.gz": 0o644,
    "/usr/share/doc/mnemo/copyright": 0o644,
    "/usr/share/doc/mnemo/operators-switching.md": 0o644,
}


# `dpkg --verify memcached` before the install: what the removal must leave as it was.
MEMCACHED_BEFORE = []


def run(*argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module", autouse=True)
def installed():
    assert DEB, "MNEMO_DEB must name the package (scripts/test.sh sets it)"
    assert os.geteuid() == 0, "dpkg -i needs root"
    MEMCACHED_BEFORE.append(run("dpkg", "--verify", "memcached").stdout)
    r = run("dpkg", "-i", DEB)
    assert r.returncode == 0, r.stdout + r.stderr


def test_files_user_and_pid_directory():
    listed = set(run("dpkg", "-L", "mnemo").stdout.split())
    for path, mode in FILES.items():
        assert path in listed, path
        st = os.stat(path)
        assert st.st_mode & 0o777 == mode, (path, oct(st.st_mode))
        assert st.st_uid == 0, path
    # Beside memcached's package, which keeps its own files.
    assert run("dpkg", "-s", "memcached").returncode == 0
    assert os.path.exists("/usr/bin/memcached")
    assert os.path.exists("/etc/memcached.conf")
    user = pwd.getpwnam("memcache")
    run_dir = os.stat("/run/memcached")
    assert (run_dir.st_uid, run_dir.st_gid) == (user.pw_uid, user.pw_gid)
    assert run("/usr/bin/mnemod", "-V").stdout.startswith("mnemod ")
    assert "migrate" in run("/usr/bin/mnemo", "--help").stdout
    for page in ("mnemod", "mnemo"):
        text = run("zcat", f"/usr/share/man/man1/{page}.1.gz").stdout
        assert text.startswith(f".TH {page.upper()} 1"), text[:80]
        assert "--help" in text or "Options:" in text


def exec_start(config):
    """The unit's ExecStart argv with `config` in /etc/memcached.conf's place; $OPTIONS unset
    expands to no argument, as systemd does."""
    line = next(l for l in UNIT.read_text().splitlines() if l.startswith("ExecStart="))
    argv = shlex.split(line.split("=", 1)[1])
    assert argv[:2] == ["/usr/lib/mnemo/mnemod-wrapper", "/etc/memcached.conf"], argv
    return [config if a == "/etc/memcached.conf" else a for a in argv if a != "$OPTIONS"]


def write_config(tmp_path, port, pidfile, extra=""):
    conf = tmp_path / "memcached.conf"
    conf.write_text(f"""# a test config in /etc/memcached.conf's format
-d
logfile /var/log/memcached.log

-m 32   # megabytes
# -v
-p {port}
   -l 127.0.0.1
-U 0
-c 256
-u memcache
-P {pidfile}
{extra}""")
    return conf


def test_the_units_command_line_serves_with_the_config(tmp_path):
    port = free_port()
    pidfile = f"/run/memcached/mnemo-test-{port}.pid"
    conf = write_config(tmp_path, port, pidfile)
    proc = subprocess.Popen(exec_start(str(conf)), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + START_DEADLINE
        while True:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.01)  # polling a connect until the deadline
        with s:
            assert roundtrip(s, b"set pkg 5 0 2\r\nok\r\nget pkg\r\n", b"END\r\n") == \
                b"STORED\r\nVALUE pkg 5 2\r\nok\r\nEND\r\n"
            settings = roundtrip(s, b"stats settings\r\n", b"END\r\n").decode()
        # The config's flags took effect.
        assert "STAT maxbytes 33554432\r\n" in settings, settings
        assert "STAT maxconns 256\r\n" in settings, settings
        # The wrapper exec'd mnemod: the unit's main process is the server, as memcache,
        # and its pid is in the config's pid file.
        assert os.readlink(f"/proc/{proc.pid}/exe") == "/usr/bin/mnemod"
        uid = next(l.split()[1] for l in open(f"/proc/{proc.pid}/status") if l.startswith("Uid:"))
        assert int(uid) == pwd.getpwnam("memcache").pw_uid
        assert open(pidfile).read().strip() == str(proc.pid)
        # The packaged tool talks to it.
        out = run("/usr/bin/mnemo", "--servers", f"127.0.0.1:{port}", "get", "pkg")
        assert (out.returncode, out.stdout) == (0, "ok\n"), out
    finally:
        proc.kill()
        proc.wait()
        if os.path.exists(pidfile):
            os.unlink(pidfile)


@pytest.mark.parametrize("line, why", [
    ("-k", "unexpected argument '-k'"),        # memcached's lock-memory flag: mnemod has none
    ("-m lots", "invalid value 'lots'"),
])
def test_a_refused_flag_stops_the_start_naming_its_line(tmp_path, line, why):
    port = free_port()
    conf = write_config(tmp_path, port, f"/run/memcached/mnemo-test-{port}.pid", extra=line + "\n")
    lineno = conf.read_text().splitlines().index(line) + 1
    r = run(*exec_start(str(conf)), timeout=60)
    assert r.returncode == 78, r
    assert r.stderr.startswith(f'mnemod-wrapper: {conf}:{lineno}: mnemod refuses "{line}": '), r.stderr
    assert why in r.stderr, r.stderr


def test_systemd_analyze_verify():
    if not shutil.which("systemd-analyze"):
        pytest.skip("no systemd-analyze on this machine")
    r = run("systemd-analyze", "verify", str(UNIT))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mnemo.service" not in r.stderr, r.stderr


def test_removing_it_leaves_memcached_as_it_was():
    """Last (pytest runs a file's tests in order): dpkg -r takes mnemo's files and nothing of
    memcached's package, its config or the memcache user."""
    r = run("dpkg", "-r", "mnemo")
    assert r.returncode == 0, r.stdout + r.stderr
    for path in FILES:
        assert not os.path.exists(path), path
    assert run("dpkg", "--verify", "memcached").stdout == MEMCACHED_BEFORE[0]
    assert os.path.exists("/etc/memcached.conf")
    pwd.getpwnam("memcache")

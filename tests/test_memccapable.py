"""memccapable (Debian's libmemcached-tools) runs its ASCII protocol checks (-a) against the
server: it must exit 0 and report no failed check. memcached itself is the control."""
import re
import shutil
import subprocess

import pytest

from servers import Server

MEMCCAPABLE = shutil.which("memccapable") or "/usr/bin/memccapable"


@pytest.mark.parametrize("kind,flags", [("mnemod", []), ("mnemod", ["-t", "1"]), ("memcached", [])],
                         ids=["mnemod", "mnemod-t1", "memcached"])
def test_memccapable_ascii(kind, flags):
    with Server(kind, *flags) as srv:
        r = subprocess.run([MEMCCAPABLE, "-a", "-t", "10", "-h", "127.0.0.1", "-p", str(srv.port)],
                           capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        results = re.findall(r"^(ascii [\w ]+?)\s+\[(\w+)\]", out, re.M)
        failed = [name for name, verdict in results if verdict != "pass"]
        assert r.returncode == 0, out
        assert not failed, out
        assert len(results) >= 20, out  # the checks actually ran
        assert "All tests passed" in out, out
        assert srv.alive()

"""memccapable (Debian's libmemcached-tools) runs its ASCII protocol checks (-a) against the
server. memcached 1.6.18 and 1.6.38 are the controls and pass every check.

Two checks fail on mnemod as they fail on memcached 1.6.45 (tried against a 1.6.45 built from
source, the same two at the same assertion): `ascii delete` and `ascii delete noreply` send
`delete <key> <time>` and want an error, which 1.6.40's parser no longer gives (it ignores what
follows the key, docs/compatibility.md). Every other check must pass."""
import re
import shutil
import subprocess

import pytest

from servers import Server

MEMCCAPABLE = shutil.which("memccapable") or "/usr/bin/memccapable"

# The checks memccapable fails on a server that follows memcached 1.6.40's parser; with -v each
# names this assertion (memcapable.cc's receive_error_response after the delete with a time).
FAILS_SINCE_1_6_40 = ["ascii delete", "ascii delete noreply"]


def run_memccapable(port, *args):
    """memccapable's verdicts: ({check: passed}, its whole output, exit status). A failed
    check's name is followed by its assertion, not by a verdict on the same line."""
    r = subprocess.run([MEMCCAPABLE, "-t", "10", *args, "-h", "127.0.0.1", "-p", str(port)],
                       capture_output=True, text=True, timeout=120)
    names = re.findall(r"((?:ascii|binary) \w+(?: noreply)?) {2,}(\[pass\])?", r.stdout)
    return {name: bool(ok) for name, ok in names}, r.stdout + "\n" + r.stderr, r.returncode


def assert_fails_as_1_6_45(port, verdicts, out):
    """The failed checks are exactly FAILS_SINCE_1_6_40, each at the assertion 1.6.45 fails it."""
    assert sorted(n for n, ok in verdicts.items() if not ok) == FAILS_SINCE_1_6_40, out
    for name in FAILS_SINCE_1_6_40:
        r = subprocess.run([MEMCCAPABLE, "-v", "-t", "10", "-T", name, "-h", "127.0.0.1", "-p", str(port)],
                           capture_output=True, text=True, timeout=120)
        assert "receive_error_response()" in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("kind,flags", [("mnemod", []), ("mnemod", ["-t", "1"]), ("memcached", []),
                                        ("memcached-new", [])],
                         ids=["mnemod", "mnemod-t1", "memcached", "memcached-new"])
def test_memccapable_ascii(kind, flags):
    with Server(kind, *flags) as srv:
        verdicts, out, status = run_memccapable(srv.port, "-a")
        assert len(verdicts) >= 20, out  # the checks actually ran
        if kind == "mnemod":
            assert_fails_as_1_6_45(srv.port, verdicts, out)
            assert status == 1 and f"{len(FAILS_SINCE_1_6_40)} of {len(verdicts)} tests failed" in out, out
        else:
            assert status == 0 and "All tests passed" in out, out
            assert all(verdicts.values()), out
        assert srv.alive()

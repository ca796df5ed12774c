"""Record memcached's replies into the conversation tables.

    .venv/bin/python tests/record_tables.py [tests/tables/text.txt ...]

Runs every case of the given tables (default: every new-format table) against a fresh real
memcached 1.6.38 (Debian 13's, kind "memcached-new") each and rewrites the `< ` lines with what
it answered. `<45 ` lines (memcached 1.6.45's reply where it differs) are kept as written, or,
with MEMCACHED_1_6_45_BIN naming a memcached 1.6.45 built from upstream's tag (not part of the
test run: Debian ships no 1.6.45), recorded from it too: each step whose reply differs from
1.6.38's (after the tables' normalization) gets its `<45 ` line, and the others lose theirs.
Review the diff before committing: the tables are only as good as memcached's replies.
"""
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from conversation import load, normalize_all, run_case, save  # noqa: E402
import servers  # noqa: E402
from servers import Server, need_memcached_new  # noqa: E402

NEWEST = os.environ.get("MEMCACHED_1_6_45_BIN")


def run_newest(case):
    """The case's replies from memcached 1.6.45 (kind memcached-new pointed at that binary)."""
    old, servers.MEMCACHED_NEW = servers.MEMCACHED_NEW, NEWEST
    try:
        with Server("memcached-new", *case.flags) as srv:
            return run_case(srv, case)
    finally:
        servers.MEMCACHED_NEW = old


def main(paths):
    version = subprocess.run([need_memcached_new(), "-V"], capture_output=True, text=True).stdout.split()[1]
    for path in paths:
        path = pathlib.Path(path)
        header = []
        for raw in path.read_text().splitlines():
            if raw.startswith("== "):
                break
            header.append(raw)
        while header and not header[-1].strip():
            header.pop()
        _, cases = load(path)
        for case in cases:
            with Server("memcached-new", *case.flags) as srv:
                for st, rep in zip(case.steps, run_case(srv, case)):
                    st[1] = rep
            if NEWEST:
                got = run_newest(case)
                old, new = normalize_all([st[1] for st in case.steps]), normalize_all(got)
                case.newer = {i: got[i] for i in range(len(got)) if old[i] != new[i]}
        save(path, version, cases, header)
        print(f"{path}: {len(cases)} cases recorded against memcached {version}")


if __name__ == "__main__":
    tables = pathlib.Path(__file__).parent / "tables"
    main(sys.argv[1:] or [p for p in sorted(tables.glob("*.txt"))
                          if any(l.startswith("== ") for l in p.read_text().splitlines())])

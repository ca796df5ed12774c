"""memcached's own test suite (t/*.t of Debian 13's memcached 1.6.38 source package) run against
mnemod.

Run by scripts/test.sh once (not per io loop) after `scripts/memcached-new.sh` has built the
tree; MEMCACHED_NEW_SRC names the tree, MNEMOD_BIN the server:
    MEMCACHED_NEW_SRC=$(bash scripts/memcached-new.sh | tail -n 1) \\
        .venv/bin/python -m pytest -q tests/memcached_suite.py
(1.6.18's suite, from `scripts/memcached-src.sh`, tests replies and option units mnemod no
longer follows since the reference moved to 1.6.38 with 1.6.45's differences: not run.)
MEMCACHED_SUITE_FILES (a shell pattern, e.g. '*extstore*') runs only the files it matches.

The suite starts "$builddir/memcached-debug ARGS -o relaxed_privileges" (a debug-build option);
a wrapper in a private build dir stands in for it, drops that one option and execs the server
under test. Every file runs against mnemod. The verdict per file:

  pass / skip   as the suite itself decides (a skip's reason is its own, e.g. no extstore)
  known         fails on mnemod for a reason written in KNOWN below: a deliberate difference
                or a gap still open; docs/compatibility.md carries the same table (KNOWN_FROM:
                only tests from a given number on may fail; KNOWN_ASSERTIONS: exactly the
                named assertions fail, every other one of the file passes)
  environment   fails on mnemod twice and, run against the real memcached in the same run,
                fails there too: the file is sensitive to this machine (timing), not to mnemod

Anything else fails the test: a file that fails on mnemod only, a KNOWN file that passes
(the list must stay true: remove it), or a file skipped on mnemod that memcached runs
without being named in SKIPS_ONLY_ON_MNEMOD.
"""
import concurrent.futures
import fnmatch
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

from servers import MEMCACHED_NEW, MNEMOD

# Debian 13's 1.6.38 tree (scripts/memcached-new.sh): its suite runs too, with 1.6.38 itself as
# the reference for the files mnemod fails (issue 48).
SRC_NEW = os.environ.get("MEMCACHED_NEW_SRC")
ONLY = os.environ.get("MEMCACHED_SUITE_FILES", "*")
# The proxy's files need memcached built with --enable-proxy (Debian does not): not run.
PROXY = "proxy*"

# Files mnemod does not pass, and why. A gap that is closed comes off this list (the test says so).
KNOWN = {
    "64bit.t": "needs memcached's debug-build hook T_MEMD_INITIAL_MALLOC and its slab preallocation",
    "conn-limits.t": "memcached answers SERVER_ERROR out of memory writing get response when "
    "response objects exhaust -m; mnemo's reply buffers are not taken from the item memory",
    "dyn-maxbytes.t": "expects evictions counted per slab class after cache_memlimit shrinks",
    "flush-all.t": "asserts memcached's quirk that a set made in the same second as flush_all 0 "
    "is lost at least once; mnemo keeps it",
    "issue_14.t": "counts memory by slab chunk size (`bytes` grows by the chunk, not the item)",
    "issue_163.t": "`reclaimed` (memory of an expired item reused by a store) stays 0: segments "
    "are never reused item by item",
    "issue_183.t": "`reclaimed` stays 0 (see issue_163.t)",
    "issue_22.t": "reads `stats items` evictions of slab class 1 under -m 3: mnemo has no classes",
    "issue_42.t": "reads the slab allocator's chunk sizes",
    "lru-crawler.t": "reads per-slab-class used chunks and reclaims after a crawl",
    "lru-maintainer.t": "expects memcached's temporary LRU (-o temporary_ttl: stats settings "
    "temp_lru, items:31:number_temp) to keep an unfetched short-TTL item through evictions",
    "lru.t": "expects memcached's LRU to evict a 1 MB item mnemo's S3-FIFO keeps",
    "restart.t": "memcached's -e is a memory-mapped cache file (restart state in FILE.meta); "
    "mnemod's -e is a snapshot written at shutdown",
    "slabs-reassign-chunked.t": "slab page reassignment: mnemo has no slab classes",
    "slabs-reassign2.t": "slab page reassignment: mnemo has no slab classes",
    "slabs_reassign.t": "slab page reassignment: mnemo has no slab classes",
    "watcher.t": "tests 1-13 pass; its combined-logs block sets one item into a full cache and "
    "waits for that set's eviction line: mnemo evicts a segment at a time, so one set that finds "
    "room in the open segment evicts nothing (the lines come when a segment goes: "
    "tests/test_watch.py); the -W block after it is not reached",
}

# Files that fail on mnemod in exactly these assertions (their names, or "line N" of the .t
# file for an unnamed one: test numbers move with the suite's polling loops), and why: the run fails if any other assertion of the file fails, if one of
# these passes, or if the file stops before its plan's end.
KNOWN_ASSERTIONS = {
    # Its two unnamed checks after 60 MB of values went into a 64 MB file
    # (extstore_objects_evicted > 0, miss_from_extstore > 0).
    "binary-extstore.t": (("line 207", "line 208"), "expects flash pages evicted (and misses "
                          "from them) after 60 MB of values went into its 64 MB file; mnemo's "
                          "compaction keeps them all: none are evicted"),
    "error-extstore.t": (("some extstore queries aborted", "can no longer read back item",
                          "check extstore oom counter"),
                         "expects flash reads to abort (get_aborted_extstore) and SERVER_ERROR out "
                         "of memory writing get response when a read finds no item memory; mnemo's "
                         "reads need none"),
    "extstore.t": (("append fails", "prepend fails"), "append/prepend to a flashed item: memcached "
                   "answers NOT_STORED, mnemo brings the value back and stores (issue 37 asks for it)"),
}

# 1.6.38's suite: files (or assertions) it adds to the lists above, and why. Where mnemod
# follows 1.6.40's parser or 1.6.45's replies (issue 48: the newest release where the two
# disagree), 1.6.38's own test of the old reply fails by design.
KNOWN_NEW = {
    "slabs-mover.t": "the slab page mover (1.6.35's rewrite): moves pages between slab classes and "
    "counts it in slab_reassign_* stats; mnemo has no slab classes (its reassign is a no-op)",
    "slabs-cas.t": "reads which slab class an item landed in and waits for the slab rebalancer "
    "to start: mnemo has no slab classes",
    "extstore-overdel.t": "waits for an item overwritten over and over to leave RAM (items of "
    "class 3 and up back to 0) with ext_item_age=0; mnemo ages items by segment, so the newest "
    "copy stays in RAM and the file waits forever",
}
KNOWN_ASSERTIONS_NEW = {
    "extstore-jbod.t": (("at least two pages reclaimed",), "expects whole flash pages reclaimed "
                        "after deletes; mnemo's compaction copies their live records out first, "
                        "so its pages are recycled by compaction, not reclaimed empty"),
    "extstore-tiered.t": (("at least two pages reclaimed", "at least two compact rescues",
                           "compact bucket has dedicated free pages", "fewer free compact pages"),
                          "`ext_path=FILE:SIZE:compact` pages serving compaction alone: mnemod "
                          "accepts the bucket but its files share one page pool (docs/flash.md)"),
    "extstore-tiered2.t": (("all COLDCOMPACT buckets are currently free", "all OLD buckets are currently free",
                            "at least two pages reclaimed", "at least two compact rescues",
                            "compact rescues to COLDCOMPACT", "compact rescues to OLD",
                            "fewer free coldcompact pages", "fewer free old pages"),
                           "the coldcompact and old buckets (1.6.38): accepted, but one shared "
                           "page pool (docs/flash.md)"),
}
# Files (and assertions) of both suites that test a reply memcached 1.6.40's parser changed:
# mnemod follows 1.6.45 there, so 1.6.18's and 1.6.38's own tests of the old reply fail by
# design (each with the same name in both trees).
PARSER_1_6_40 = {
    "cas.t": "`cas` without its CAS token: 1.6.40 answers one CLIENT_ERROR bad command line "
    "format and swallows the data (mnemod follows 1.6.45); the older tests wait for two ERRORs",
    "issue_3.t": "`delete k 0`-style extra words: 1.6.40 ignores them (DELETED/NOT_FOUND) where "
    "the older tests expect the usage error",
}
PARSER_1_6_40_ASSERTIONS = {
    "metaget.t": (("error from blank command",), "a blank line: 1.6.40 answers CLIENT_ERROR bad "
                  "command line format (mnemod follows 1.6.45), the older releases ERROR"),
    "shutdown.t": (("error when shutdown is not enabled",), "`shutdown` without -A: 1.6.40 answers "
                   "SERVER_ERROR: shutdown not enabled, the older releases ERROR: shutdown not enabled"),
}
# Entries of the 1.6.18 lists that 1.6.38's suite no longer trips (its tests changed).
NOT_KNOWN_NEW = {"binary-extstore.t", "flush-all.t"}

# Files whose own skip condition holds on mnemod but not on memcached, and why (none today:
# the extstore files run since mnemod serves -o ext_path).
SKIPS_ONLY_ON_MNEMOD = {}

# Files known to fail only from a test number on (a block the file runs last), and why: a
# failure before it is a regression like any other.
KNOWN_FROM = {}

# Files run with the suite's TLS switch on (every server they start listens with -Z).
TLS_FILES = re.compile(r"^ssl_.*\.t$")
# A known failure can hang until the suite's own 600 s limit (the watcher waits for log lines
# that never come); it is cut short, any other file gets the long limit.
KNOWN_LIMIT = 40
# MEMCACHED_SUITE_LIMIT shortens it while triaging a new tree (a hang then costs less).
LIMIT = int(os.environ.get("MEMCACHED_SUITE_LIMIT", "600"))
# The files mostly sleep and wait on sockets: the whole suite is about 50 s of CPU over 600 s
# of files, so 8 run at once.
WORKERS = 8
# The files that take 20-60 s each (the others take seconds) start first, so that none of them
# starts last and runs alone at the end (sorted by name, the watcher files did: 140 s in all).
SLOW_FIRST = ("watcher.t", "watcher_connid.t", "slabs-reassign2.t", "binary.t", "chunked-extstore.t",
              "restart.t", "binary-extstore.t", "00-startup.t", "extstore-jbod.t", "extstore.t")


def _builddir(src, server):
    """A directory that looks like memcached's build dir: t/ from the source at `src`, timedrun,
    and a memcached-debug wrapper that runs `server`."""
    src = pathlib.Path(src)
    d = pathlib.Path(tempfile.mkdtemp(prefix="memcached-suite-"))
    (d / "t").symlink_to(src / "t")
    shutil.copy2(src / "timedrun", d / "timedrun")
    wrapper = d / "memcached-debug"
    wrapper.write_text(
        "#!/bin/bash\n"
        "# memcached-debug ARGS -o relaxed_privileges: the option exists only in debug builds\n"
        "args=()\n"
        'while [ $# -gt 0 ]; do\n'
        '  if [ "$1" = "-o" ] && [ "${2:-}" = "relaxed_privileges" ]; then shift 2; continue; fi\n'
        '  args+=("$1"); shift\n'
        "done\n"
        f'exec {server} "${{args[@]}}"\n'
    )
    wrapper.chmod(0o755)
    return d


def _run_file(builddir, name, limit, known_assertions):
    """Run one .t file; returns (verdict, detail) with verdict in pass|skip|fail."""
    env = dict(os.environ)
    env.pop("SSL_TEST", None)
    if TLS_FILES.match(name):
        env["SSL_TEST"] = "1"
    try:
        p = subprocess.run(
            ["perl", f"t/{name}"], cwd=builddir, env=env, capture_output=True, timeout=limit
        )
    except subprocess.TimeoutExpired:
        return "fail", f"no result within {limit}s"
    out = p.stdout.decode(errors="replace")
    m = re.search(r"^1\.\.0 # (?:SKIP|skip)\s*(.*)$", out, re.M)
    if m:
        return "skip", m.group(1).strip()
    plan = re.search(r"^1\.\.(\d+)", out, re.M)
    oks = len(re.findall(r"^ok \d+", out, re.M))
    not_oks = re.findall(r"^not ok (\d+)(?: - (.*))?$", out, re.M)
    if p.returncode == 0 and plan and oks == int(plan.group(1)) and not not_oks:
        return "pass", f"{oks} tests"
    if name in known_assertions and not_oks and plan and oks + len(not_oks) == int(plan.group(1)):
        failed = set(_failed_names(out, p.stderr.decode(errors="replace")))
        if failed == set(known_assertions[name][0]):
            return "known-exact", f"{oks} ok, not ok exactly: {', '.join(sorted(failed))}"
    if name in KNOWN_FROM and not_oks and oks >= KNOWN_FROM[name][0] - 1:
        # Every test before the block passed, and only tests of the block failed.
        if min(int(n) for n, _ in not_oks) >= KNOWN_FROM[name][0]:
            return "known-from", f"{oks} ok, {len(not_oks)} not ok from test {KNOWN_FROM[name][0]} on"
    first = (not_oks[0][1] or f"test {not_oks[0][0]}") if not_oks else \
        (p.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
    return "fail", f"exit {p.returncode}, {oks} ok, {len(not_oks)} not ok; first: {first[:120]}"


def _failed_names(out, err):
    """Each failed assertion's name, or "line N" for an unnamed one: Test::More writes a
    "Failed test ... at t/FILE line N." diagnostic per failure to stderr, in order."""
    at = re.findall(r"Failed test.*?(?:\n#)?\s+at t/\S+ line (\d+)\.", err)
    for i, (_, title) in enumerate(re.findall(r"^not ok (\d+)(?: - (.*))?$", out, re.M)):
        yield title or (f"line {at[i]}" if i < len(at) else "?")


def _run_all(src, server, names, limits, known_assertions):
    builddir = _builddir(src, server)
    try:
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            order = sorted(names, key=lambda n: (n not in SLOW_FIRST, n))
            futs = {n: pool.submit(_run_file, builddir, n, limits(n), known_assertions) for n in order}
            return {n: f.result() for n, f in futs.items()}
    finally:
        shutil.rmtree(builddir, ignore_errors=True)


@pytest.mark.skipif(not SRC_NEW, reason="MEMCACHED_NEW_SRC is not set (scripts/test.sh sets it)")
def test_memcached_1_6_38_suite_against_mnemod():
    known = {k: v for k, v in {**KNOWN, **PARSER_1_6_40, **KNOWN_NEW}.items() if k not in NOT_KNOWN_NEW}
    assertions = {k: v for k, v in {**KNOWN_ASSERTIONS, **PARSER_1_6_40_ASSERTIONS, **KNOWN_ASSERTIONS_NEW}.items()
                  if k not in NOT_KNOWN_NEW}
    run_suite(SRC_NEW, MEMCACHED_NEW, known, assertions)


def run_suite(src, reference, known, known_assertions):
    """Every file of the tree at `src` against mnemod; `reference` is the memcached built from
    that tree's release, run for the files mnemod fails outside `known`."""
    names = sorted(p.name for p in (pathlib.Path(src) / "t").glob("*.t"))
    assert len(names) > 60, f"the suite at {src} looks incomplete: {len(names)} files"
    names = [n for n in names if fnmatch.fnmatch(n, ONLY) and not fnmatch.fnmatch(n, PROXY)]
    assert names, f"MEMCACHED_SUITE_FILES={ONLY} matches no file"
    mnemod = _run_all(src, MNEMOD, names, lambda n: KNOWN_LIMIT if n in known else LIMIT, known_assertions)

    # A file failed outside known runs once more on mnemod (the suite sleeps and counts seconds:
    # a loaded machine can miss a tick), then, if it fails again, on memcached for reference.
    again = [n for n, (v, _) in mnemod.items() if v == "fail" and n not in known]
    mnemod.update(_run_all(src, MNEMOD, again, lambda n: LIMIT, known_assertions))

    # The reference: memcached, for the files mnemod fails outside known and those it skips.
    recheck = [n for n, (v, _) in mnemod.items() if (v == "fail" and n not in known) or v == "skip"]
    memcached = _run_all(src, reference, recheck, lambda n: LIMIT, known_assertions)

    rows, problems = [], []
    for n in names:
        verdict, detail = mnemod[n]
        ref = memcached.get(n)
        if verdict == "fail" and n in known:
            shown = "known"
        elif verdict in ("known-from", "known-exact"):
            shown = "known"
        elif verdict == "fail" and ref and ref[0] == "fail":
            shown = "environment"
        elif verdict == "fail" and n in known_assertions:
            shown = "FAIL"
            problems.append(f"{n} fails otherwise than in {known_assertions[n][0]}: {detail}")
        elif verdict == "fail":
            shown = "FAIL"
            problems.append(f"{n} fails on mnemod only: {detail}")
        elif verdict == "pass" and (n in known or n in known_assertions):
            shown = "PASS?"
            problems.append(f"{n} passes now: take it off KNOWN (and docs/compatibility.md)")
        elif verdict == "skip" and ref and ref[0] != "skip" and n not in SKIPS_ONLY_ON_MNEMOD:
            shown = "SKIP?"
            problems.append(f"{n} is skipped on mnemod ({detail}) but runs on memcached")
        elif verdict == "skip" and n in SKIPS_ONLY_ON_MNEMOD and ref and ref[0] == "skip":
            shown = "SKIP?"
            problems.append(f"{n} is skipped on memcached too: take it off SKIPS_ONLY_ON_MNEMOD")
        else:
            shown = verdict
        why = known.get(n) or SKIPS_ONLY_ON_MNEMOD.get(n) or (KNOWN_FROM[n][1] if verdict == "known-from" else detail)
        if verdict == "known-exact":
            why = f"{detail}: {known_assertions[n][1]}"
        rows.append(f"  {n:28} {shown:12} {why}")
    counts = {}
    for r in rows:
        k = r.split()[1]
        counts[k] = counts.get(k, 0) + 1
    print(f"\nmemcached's t/ suite ({pathlib.Path(src).name}) against mnemod (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")")
    print("\n".join(rows))
    assert not problems, "\n".join(problems)

"""fget against mnemod with the SDK's example filters (topk, select), split over three servers
and merged as the Rust client merges: results equal a computation over all the records."""
import os
import pathlib
import random
import struct
import subprocess

import pytest

import mnemo
from conftest import ROOT, Server

EXAMPLES = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "filter-examples"


def example_wasm(name):
    """The example filter as WebAssembly, built as the Rust tests build it when missing (cargo
    test builds them first in scripts/test.sh, so this is normally found)."""
    path = EXAMPLES / "wasm32-unknown-unknown" / "release" / "examples" / f"{name}.wasm"
    if not path.exists():
        # The flags of crates/filter/tests/support/examples.rs, which builds the same directory.
        subprocess.run(["cargo", "build", "--quiet", "--release", "-p", "mnemo-filter-examples",
                        "--examples", "--config", "profile.release.lto=false",
                        "--config", "profile.release.debug=0", "--target-dir", str(EXAMPLES),
                        "--target", "wasm32-unknown-unknown"], cwd=ROOT, check=True)
    return path


def record(user, article, ts):
    return struct.pack("<QQQ", user, article, ts)


def records(data):
    return [struct.unpack_from("<QQQ", data, i) for i in range(0, len(data) - len(data) % 24, 24)]


@pytest.fixture(scope="module")
def filtered():
    spec = [f"topk={example_wasm('topk')}", f"select={example_wasm('select')}"]
    # A deadline far above the default 5 ms: no call may time out on a loaded machine.
    servers = Server.many(3, "mnemod", "--filter", spec[0], "--filter", spec[1], "--filter-timeout-ms", "2000")
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def feed(filtered):
    """100 friends' feeds, 30 records each, over the three servers."""
    c = mnemo.Client([s.addr for s in filtered], compression=None)
    rng = random.Random(1)
    feeds = {}
    for user in range(100):
        feeds[f"feed:{user}"] = [(user, rng.randrange(1000), rng.randrange(10_000))
                                 for _ in range(30)]
    assert c.set_many({k: b"".join(record(*r) for r in v) for k, v in feeds.items()}) == []
    assert len({c.route(k) for k in feeds}) == 3
    return c, feeds


def newest(recs, k):
    return sorted(recs, key=lambda r: (-r[2], r[0], r[1]))[:k]


def test_top_k_merge_equals_one_sort(feed):
    c, feeds = feed
    for k in [1, 10, 100]:
        got = c.fget("topk", list(feeds), str(k).encode(), top_k=k)
        want = newest([r for v in feeds.values() for r in v], k)
        assert records(got) == want


def test_select_concatenates_parts(feed):
    c, feeds = feed
    got = records(c.fget("select", list(feeds)[:40], b"user=7"))
    assert got == feeds["feed:7"]
    assert c.fget("select", ["feed:1", "missing"], b"user=2") == b""


def test_custom_merge_sees_every_server(feed, filtered):
    c, feeds = feed
    parts = c.fget("topk", list(feeds), b"5", merge=list)
    assert {p.server for p in parts} == {s.addr for s in filtered}
    assert sum(p.keys for p in parts) == len(feeds)
    assert all(isinstance(p, mnemo.FilterPart) and len(p.data) == 5 * 24 for p in parts)


def test_filter_errors(feed):
    c, feeds = feed
    with pytest.raises(mnemo.ClientError, match="unknown filter"):
        c.fget("nosuch", ["feed:1"])
    with pytest.raises(mnemo.ServerError, match="bad argument"):
        c.fget("topk", ["feed:1"], b"zero")
    with pytest.raises(mnemo.IllegalInputError):
        c.fget("bad name", ["feed:1"])
    assert c.get("feed:1") is not None  # connections still in step


def test_fget_on_asyncio(feed):
    import asyncio

    import mnemo.aio
    _, feeds = feed
    servers = feed[0].servers

    async def main():
        a = mnemo.aio.Client(servers)
        return await a.fget("topk", list(feeds), b"10", top_k=10)

    assert records(asyncio.run(main())) == newest([r for v in feeds.values() for r in v], 10)

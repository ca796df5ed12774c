"""The flash tier's counts where mnemo was aligned with memcached's extstore, each against the
real memcached with the same flags in the same run (issue 37). The differences kept are listed,
with their reasons, in docs/flash.md ("Counts that differ")."""
import pytest

from servers import Server, roundtrip, stats
from test_flash import get_many, key, set_many, value, wait_until


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_an_item_dropped_by_drop_unread_is_a_miss_from_extstore_at_its_next_lookup(kind, tmp_path):
    """ext_drop_unread's compaction drops the unread records of the oldest page; memcached
    keeps the items' headers (still in curr_items) until a lookup finds the record's page
    freed, which is then a miss counted in miss_from_extstore. mnemod does the same: every key
    not served after the drop is one more miss_from_extstore, and only then leaves
    curr_items."""
    args = ["-m", "64", "-o", "ext_item_size=512,ext_item_age=1,ext_wbuf_size=2,ext_page_size=8,"
            f"ext_recache_rate=10000,ext_max_frag=0,ext_compact_under=1,ext_path={tmp_path / 'flash'}:64m"]
    big = lambda k: value(int(k.split(b":")[1]), 20000)
    keys = [key(i) for i in range(2000)]  # 40 MB: five 8 MB pages
    read = keys[:200:2]  # on the oldest page, read twice: kept by both servers
    with Server(kind, *args) as srv, srv.connect() as s:
        set_many(s, keys, big)
        before = wait_until(s, "on flash", lambda st: int(st["extstore_objects_written"]) >= 1950
                            and int(st["extstore_pages_free"]) <= 3)
        for _ in range(2):
            assert get_many(s, read) == {k: big(k) for k in read}
        for cmd in [b"max_frag 0", b"compact_under 4", b"drop_under 4", b"drop_unread 1"]:
            assert roundtrip(s, b"extstore " + cmd + b"\r\n") == b"OK\r\n"
        dropped = wait_until(s, "dropped", lambda st: int(st["extstore_compact_skipped"]) > 0
                             and int(st["extstore_pages_free"]) > int(before["extstore_pages_free"]))
        assert roundtrip(s, b"extstore drop_unread 0\r\n") == b"OK\r\n"
        # Nothing evicted, nothing gone yet: the dropped items are still counted.
        assert (dropped["evictions"], dropped["curr_items"]) == ("0", str(len(keys))), dropped
        got = get_many(s, keys)
        after = stats(s)
        assert all(v == big(k) for k, v in got.items())
        assert all(k in got for k in read)
        missed = int(after["miss_from_extstore"]) - int(dropped["miss_from_extstore"])
        assert 0 < missed == len(keys) - len(got), (missed, len(got), after)
        assert (after["evictions"], after["curr_items"]) == ("0", str(len(got))), after
    print(f"{kind}: compact_skipped {dropped['extstore_compact_skipped']}, {len(keys) - len(got)} keys "
          f"gone, miss_from_extstore +{missed}")


"""The flash tier's counts where mnemo was aligned with memcached's extstore, each against the
real memcached with the same flags in the same run (issue 37). The differences kept are listed,
with their reasons, in docs/flash.md ("Counts that differ")."""
import pytest

from servers import Server, stats
from test_flash import DROP_UNREAD_KEYS, DROP_UNREAD_READ, big_value, drop_unread_args, drop_unread_pass, get_many


@pytest.mark.parametrize("kind", ["mnemod", "memcached"])
def test_an_item_dropped_by_drop_unread_is_a_miss_from_extstore_at_its_next_lookup(kind, tmp_path):
    """ext_drop_unread's compaction drops the unread records of the oldest page; memcached
    keeps the items' headers (still in curr_items) until a lookup finds the record's page
    freed, which is then a miss counted in miss_from_extstore. mnemod does the same: every key
    not served after the drop is one more miss_from_extstore, and only then leaves
    curr_items."""
    keys, read = DROP_UNREAD_KEYS, DROP_UNREAD_READ  # read twice: kept by both servers
    with Server(kind, *drop_unread_args(tmp_path)) as srv, srv.connect() as s:
        _, dropped = drop_unread_pass(s)
        # Nothing evicted, nothing gone yet: the dropped items are still counted.
        assert (dropped["evictions"], dropped["curr_items"]) == ("0", str(len(keys))), dropped
        got = get_many(s, keys)
        after = stats(s)
        assert all(v == big_value(k) for k, v in got.items())
        assert all(k in got for k in read)
        missed = int(after["miss_from_extstore"]) - int(dropped["miss_from_extstore"])
        assert 0 < missed == len(keys) - len(got), (missed, len(got), after)
        assert (after["evictions"], after["curr_items"]) == ("0", str(len(got))), after
    print(f"{kind}: compact_skipped {dropped['extstore_compact_skipped']}, {len(keys) - len(got)} keys "
          f"gone, miss_from_extstore +{missed}")


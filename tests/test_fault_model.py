"""issue 47's rule, "a cache may forget, never lie", checked by the fault model (faultmodel.py)
rather than by cases: random operations from several clients, random faults between and in
the middle of them (kill -9, SIGINT, SIGTERM, `shutdown`, restarts with other flags, damaged
snapshot, flash file or flash list, a second mnemod on the same files), and after every
restart every key read back against what was acknowledged.

Bounded: MNEMO_FAULT_SECONDS (default 40) is this file's budget for one pytest run, shared by
the configurations; scripts/test.sh runs it once per event loop, so about 80 s in all. The
seed is MNEMO_FAULT_SEED, or a random one; every failure message starts with it. A long run:
bench/faults.sh."""
import os
import random

import pytest

from faultmodel import Engine, configurations

CONFIGS = configurations()
SEED = int(os.environ.get("MNEMO_FAULT_SEED") or random.randrange(1 << 32))
BUDGET = float(os.environ.get("MNEMO_FAULT_SECONDS", "40"))


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_no_key_ever_holds_a_stale_deleted_or_foreign_value(config):
    counts = Engine(config, SEED, BUDGET / len(CONFIGS)).run()
    back = "".join(f", {counts['back_' + k]} keys back after {k} with -e ({counts['known_' + k]} surely present before)"
                   for k in ("sigterm", "sigint", "shutdown") if counts["known_" + k])
    print(f"{config.name} seed={SEED} io_loop={os.environ.get('MNEMO_IO_LOOP', 'default')}: "
          f"{counts['seconds']} s, {counts['ops']} ops, {counts['restarts']} restarts, "
          f"{counts['keys_checked']} keys checked, {counts['in_doubt']} writes cut off{back}; "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k.startswith(("fault_", "damage_", "slip_"))))
    assert counts["restarts"] > 0 and counts["keys_checked"] > 0, counts

"""The fault model's long run (bench/faults.sh): tests/faultmodel.py's configurations in turn,
each run with a new seed for RUN_SECONDS, until DURATION seconds have passed; a failing run is
recorded (seed, configuration, what) and the next one starts. Prints a summary table and exits
non-zero if any run failed."""
import collections
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from faultmodel import Engine, Violation, bench_configurations  # noqa: E402


def main():
    duration = float(os.environ.get("DURATION", "1800"))
    per_run = float(os.environ.get("RUN_SECONDS", "120"))
    only = os.environ.get("CONFIGS", "").split()
    # mixed-orphans only when named: a run without -e between two with it leaves no trace
    # for the third to see (docs/operations.md, "Warm restart"), so it fails by design.
    configs = [c for c in bench_configurations() if (c.name in only if only else not c.orphans)]
    rng = random.Random(os.environ.get("MNEMO_FAULT_SEED"))
    total = collections.Counter()
    per_config = collections.defaultdict(collections.Counter)
    failures = []
    started = time.monotonic()
    i = 0
    while time.monotonic() - started < duration:
        cfg = configs[i % len(configs)]
        i += 1
        seed = rng.randrange(1 << 32)
        budget = max(5.0, min(per_run, duration - (time.monotonic() - started)))
        print(f"# run {i}: {cfg.name} seed={seed} for {budget:.0f} s", flush=True)
        eng = Engine(cfg, seed, budget)
        try:
            counts = eng.run()
        except Violation as v:
            first = str(v).splitlines()[0]
            failures.append((cfg.name, seed, first))
            print(str(v), flush=True)
            counts = eng.counts
            counts["failed_runs"] += 1
        counts["runs"] += 1
        total.update(counts)
        per_config[cfg.name].update(counts)
        print(f"#   {cfg.name} seed={seed}: {counts['restarts']} restarts, {counts['keys_checked']} keys checked, "
              f"wrong {counts['wrong']}", flush=True)
    minutes = (time.monotonic() - started) / 60
    print(f"\nfault model, {minutes:.1f} min, {MNEMOD}")
    rows = ["runs", "failed_runs", "ops", "restarts", "keys_checked", "reads", "wrong", "in_doubt", "flush_all",
            "flag_changes", "graceful_known", "graceful_back", "on_flash_at_faults"]
    rows += sorted(k for k in total if k.startswith(("restart_", "fault_", "damage_", "slip_", "back_", "known_")))
    names = [c.name for c in configs]
    print("| | " + " | ".join(names) + " | all |")
    print("|---|" + "---:|" * (len(names) + 1))
    for r in rows:
        print(f"| {r} | " + " | ".join(str(per_config[n][r]) for n in names) + f" | {total[r]} |")
    print("\ngraceful_back of graceful_known (back_KIND of known_KIND per stop): keys present after a graceful "
          "restart with -e, of those whose last acknowledged write left a value before the stop (a report, not the rule)")
    for name, seed, first in failures:
        print(f"FAILED {name} seed={seed}: {first}")
    return 1 if failures else 0


MNEMOD = os.environ.get("MNEMOD_BIN", "")

if __name__ == "__main__":
    sys.exit(main())

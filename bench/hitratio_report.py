#!/usr/bin/env python3
"""The table and the miss-ratio curves of bench/hitratio.sh, from its rows on stdin.

  hitratio_report.py OUT THREADS QUICK QUICK_REQUESTS < rows

A row: workload fraction footprint server mem_mb hits counted hit_ratio lag data held hit_bytes
counted_bytes rss_kb
(hitratio.sh's run_one output after the first five). Prints the markdown table and writes
OUT/<workload>.png: miss ratio against memory (what memcached held, which is mnemod's -m), one
line per server.
"""
import statistics
import sys
from collections import defaultdict

MIB = 1 << 20


def main():
    out, threads, quick, quick_n = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
    rows = [ln.split() for ln in sys.stdin if ln.strip()]
    by = {}
    order = []
    for r in rows:
        wl, f, fp, server, mem = r[0], float(r[1]), int(r[2]), r[3], int(r[4])
        hits, counted, lag, held = int(r[5]), int(r[6]), r[8], int(r[10])
        hit_bytes, counted_bytes, rss = int(r[11]), int(r[12]), int(r[13])
        if (wl, f) not in order:
            order.append((wl, f))
        by[(wl, f, server)] = dict(fp=fp, mem=mem, miss=1 - hits / counted, counted=counted,
                                   bmiss=1 - hit_bytes / counted_bytes, lag=lag, held=held,
                                   rss=rss * 1024)
    note = f" (orm-night: its first {int(quick_n):,} requests)" if quick else ""
    print(f"-t {threads}; look-aside replay (get, set on a miss), first 20% of each run not counted"
          f"{note}; size = share of the workload's footprint given to memcached as -m; mnemod's -m ="
          " memcached's total_malloced + hash_bytes at the end of its run, in MiB rounded down;"
          " RSS at the end of the run")
    print()
    print("| workload | size | requests counted | memcached -m | memcached miss ratio | mnemod -m |"
          " mnemod miss ratio | mnemod/memcached | byte miss ratio memcached / mnemod |"
          " RSS memcached / mnemod (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios = defaultdict(list)
    for wl, f in order:
        mc, mn = by[(wl, f, "memcached")], by[(wl, f, "mnemod")]
        ratio = mn["miss"] / mc["miss"] if mc["miss"] else float("nan")
        ratios[wl].append(ratio)
        print(f"| {wl} | {f:.0%} of {mc['fp'] / MIB:.1f} MiB | {mc['counted']:,} | {mc['mem']}"
              f" | {mc['miss']:.4f} | {mn['mem']} | {mn['miss']:.4f} | {ratio:.3f}"
              f" | {mc['bmiss']:.4f} / {mn['bmiss']:.4f}"
              f" | {mc['rss'] / MIB:.1f} / {mn['rss'] / MIB:.1f} |")
    print()
    print("| workload | median mnemod/memcached miss ratio | worst |")
    print("|---|---|---|")
    for wl, v in ratios.items():
        print(f"| {wl} | {statistics.median(v):.3f} | {max(v):.3f} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(matplotlib missing: no curves drawn)", file=sys.stderr)
        return
    for wl in ratios:
        fig, ax = plt.subplots(figsize=(6, 4))
        for server in ("memcached", "mnemod"):
            pts = sorted((by[(w, f, "memcached")]["held"] / MIB, by[(w, f, server)]["miss"])
                         for w, f in order if w == wl)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=server)
        ax.set_xscale("log")
        ax.set_xlabel("memory (MiB: memcached's total_malloced + hash_bytes = mnemod's -m)")
        ax.set_ylabel("miss ratio")
        ax.set_title(f"{wl}: miss ratio at equal memory")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(f"{out}/{wl}.png", dpi=100)
        plt.close(fig)


if __name__ == "__main__":
    main()

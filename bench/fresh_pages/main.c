/* What a fresh 100 KB of anonymous memory costs this host: the price mnemod pays for each large
 * item's new buffer (MAP_POPULATE) and for each lent buffer it takes back (fresh pages), and
 * memcached for each slab page it grows by. Three ways of faulting in the same pages, N times:
 *   populate  mmap(MAP_POPULATE)
 *   touch     mmap, then a write per 4 KiB (a fault each)
 *   advise    mmap, then madvise(MADV_POPULATE_WRITE)
 * Nothing is unmapped, so every round takes pages the process never had. On a VM the first
 * rounds after boot (or after memory was given back to the host) pay the host's backing of the
 * guest's pages too: run it twice and compare.
 * Then what renewing memory the process already has costs, as mnemod renews a lent buffer
 * (MADV_DONTNEED, then MADV_POPULATE_WRITE), per 100 KB, over 512 MiB walked three times:
 *   renew 100 KB    a 100 KB buffer of 4 KiB pages at a time (mnemod's large items today)
 *   renew 2 MiB     a whole 2 MiB huge page at a time (MADV_HUGEPAGE), 20 such buffers' worth
 * The gap between the two is what large items kept in huge-page chunks, renewed whole, would
 * save on each lent buffer (issue 14). Build and run: bash bench/fresh_pages.sh */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* µs per 100 KB to renew `chunk` bytes at a time (DONTNEED, then POPULATE_WRITE) over a
 * resident, 2 MiB-aligned 512 MiB region, walked three times; `huge`: MADV_HUGEPAGE on it. */
static double renew(size_t chunk, int huge) {
    size_t total = (size_t)512 << 20, align = (size_t)2 << 20;
    char *m = mmap(0, total + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    char *p = (char *)(((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1));
    if (huge) madvise(p, total, MADV_HUGEPAGE);
    if (madvise(p, total, MADV_POPULATE_WRITE) != 0) {
        perror("madvise");
        exit(1);
    }
    long rounds = 0;
    double t0 = now();
    for (int walk = 0; walk < 3; walk++)
        for (size_t o = 0; o + chunk <= total; o += chunk, rounds++) {
            madvise(p + o, chunk, MADV_DONTNEED);
            madvise(p + o, chunk, MADV_POPULATE_WRITE);
        }
    double per_chunk = (now() - t0) / rounds;
    munmap(m, total + align);
    return per_chunk * 1e6 * (25.0 * 4096) / chunk;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 5000;
    size_t len = 25 * 4096;
    const char *names[] = {"populate", "touch", "advise"};
    printf("| way | µs per 100 KB (%d buffers each, %zu MB in all) |\n|---|---|\n", n, 3 * n * len >> 20);
    double spent[3] = {0, 0, 0};
    /* The ways take turns, buffer by buffer, so that each gets the same mix of pages the host
     * already backs and pages it does not. */
    for (int i = 0; i < 3 * n; i++) {
        int way = i % 3;
        double t0 = now();
        char *p = mmap(0, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | (way == 0 ? MAP_POPULATE : 0), -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        if (way == 1)
            for (size_t o = 0; o < len; o += 4096) p[o] = 1;
        if (way == 2 && madvise(p, len, MADV_POPULATE_WRITE) != 0) {
            perror("madvise");
            return 1;
        }
        spent[way] += now() - t0;
    }
    for (int way = 0; way < 3; way++) printf("| %s | %.1f |\n", names[way], spent[way] / n * 1e6);
    printf("| renew 100 KB (4 KiB pages) | %.1f |\n", renew(len, 0));
    printf("| renew 2 MiB (a huge page) | %.1f |\n", renew(2 << 20, 1));
    return 0;
}

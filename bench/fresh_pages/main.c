/* What a fresh 100 KB of anonymous memory costs this host: the price mnemod pays for each large
 * item's new buffer (MAP_POPULATE) and for each lent buffer it takes back (fresh pages), and
 * memcached for each slab page it grows by. Three ways of faulting in the same pages, N times:
 *   populate  mmap(MAP_POPULATE)
 *   touch     mmap, then a write per 4 KiB (a fault each)
 *   advise    mmap, then madvise(MADV_POPULATE_WRITE)
 * Nothing is unmapped, so every round takes pages the process never had. On a VM the first
 * rounds after boot (or after memory was given back to the host) pay the host's backing of the
 * guest's pages too: run it twice and compare. Build and run: bash bench/fresh_pages.sh */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
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
    return 0;
}

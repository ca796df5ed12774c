/*
 * Seed 001's top-k filter as a native library, written against mnemo_filter.h alone: the same
 * contract as examples/topk.rs, and the proof that the header is enough.
 *
 *   cc -shared -fPIC -O2 -I crates/filter-sdk/include -o libtopk_c.so crates/filter-sdk/c/topk.c
 *
 * args: K in ASCII decimal, 1..=100000. Output: the K newest records over all present values
 * (24-byte records {u64 user; u64 article; u64 ts}, little-endian; a value's trailing partial
 * record is ignored), in newest order: ts descending, then user ascending, then article
 * ascending. Flags 0.
 *
 * One counting pass sizes the result, so a too-small buffer is reported (code 2) before any
 * work. Then a heap of the K newest, whose root is the oldest kept record: most records of a
 * large input cost one comparison with the root. Everything lives on the call's own stack or
 * heap, so concurrent calls share nothing.
 */
#include <stdlib.h>

#include "mnemo_filter.h"

#define RECORD_LEN 24
#define MAX_K 100000u

typedef struct record { uint64_t user, article, ts; } record;

/* < 0 when a comes first in newest order, > 0 when b does, 0 when equal. */
static int newest_first(const record *a, const record *b) {
    if (a->ts != b->ts) return a->ts > b->ts ? -1 : 1;
    if (a->user != b->user) return a->user < b->user ? -1 : 1;
    if (a->article != b->article) return a->article < b->article ? -1 : 1;
    return 0;
}

/* 1..=MAX_K in ASCII digits only (leading zeros allowed), like the Rust filter. */
static int parse_k(const uint8_t *s, uint32_t len, uint32_t *k) {
    uint32_t i, n = 0;
    if (len == 0) return 0;
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        n = n * 10 + (uint32_t)(s[i] - '0');
        if (n > MAX_K) return 0; /* stops before n can overflow */
    }
    if (n == 0) return 0;
    *k = n;
    return 1;
}

static record decode(const uint8_t *p) {
    record r;
    r.user = mnemo_load_u64le(p);
    r.article = mnemo_load_u64le(p + 8);
    r.ts = mnemo_load_u64le(p + 16);
    return r;
}

/* The heap is ordered so that the root is the *last* record in newest order. */
static void sift_down(record *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        record t;
        if (l < n && newest_first(&h[l], &h[m]) > 0) m = l;
        if (r < n && newest_first(&h[r], &h[m]) > 0) m = r;
        if (m == i) return;
        t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void sift_up(record *h, size_t i) {
    while (i > 0) {
        size_t p = (i - 1) / 2;
        record t;
        if (newest_first(&h[i], &h[p]) <= 0) return;
        t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

uint32_t mnemo_abi_version(void) { return MNEMO_FILTER_ABI_VERSION; }

int32_t mnemo_filter(const uint8_t *input, size_t input_len, mnemo_output *out) {
    mnemo_input in;
    mnemo_cursor c;
    mnemo_entry e;
    uint32_t k;
    size_t total = 0, n, size = 0, i, off;
    record *heap;

    if (out == NULL) return MNEMO_FILTER_ERROR;
    out->len = 0;
    out->flags = 0;
    if (mnemo_input_parse(input, input_len, &in) != 0) return mnemo_output_error(out, "bad input: malformed");
    if (!parse_k(in.args, in.args_len, &k))
        return mnemo_output_error(out, "bad argument: K must be a decimal number from 1 to 100000");

    c = mnemo_input_entries(&in);
    while (mnemo_cursor_next(&c, &e) == 1)
        if (e.present) total += e.len / RECORD_LEN;
    n = total < k ? total : k;
    if (n * RECORD_LEN > out->cap || (n > 0 && out->data == NULL))
        return mnemo_output_too_large(out, n * RECORD_LEN);
    if (n == 0) return MNEMO_FILTER_OK;

    heap = malloc(n * sizeof(record));
    if (heap == NULL) return mnemo_output_error(out, "out of memory");
    c = mnemo_input_entries(&in);
    while (mnemo_cursor_next(&c, &e) == 1) {
        if (!e.present) continue;
        for (off = 0; off + RECORD_LEN <= e.len; off += RECORD_LEN) {
            record r = decode(e.data + off);
            if (size < n) {
                heap[size] = r;
                sift_up(heap, size++);
            } else if (newest_first(&r, &heap[0]) < 0) {
                heap[0] = r;
                sift_down(heap, n, 0);
            }
        }
    }
    /* Heapsort: moving the root (the oldest left) to the end leaves newest order. */
    for (i = n; i > 1; i--) {
        record t = heap[0];
        heap[0] = heap[i - 1];
        heap[i - 1] = t;
        sift_down(heap, i - 1, 0);
    }
    for (i = 0; i < n; i++) {
        uint8_t *p = out->data + i * RECORD_LEN;
        mnemo_store_u64le(p, heap[i].user);
        mnemo_store_u64le(p + 8, heap[i].article);
        mnemo_store_u64le(p + 16, heap[i].ts);
    }
    free(heap);
    out->len = n * RECORD_LEN;
    return MNEMO_FILTER_OK;
}

/*
 * mnemo_filter.h -- the native C ABI of mnemod's `fget` filters, ABI version 1.
 *
 * A native filter is a shared library that exports the two functions declared below. The
 * operator installs it (a request never names a path); mnemod calls it on its worker threads
 * with the values of the keys of one `fget` request and replies with what it returns.
 *
 * UNSANDBOXED. A native filter runs inside the server process with all of the server's
 * rights and none of the deadline, memory cap or fault isolation WebAssembly filters get: a
 * crash, an endless loop or a stray write in it takes the server down or corrupts it. Load
 * only code the operator trusts; anything else belongs in a WebAssembly filter.
 *
 * Input: one buffer, little-endian, no padding, no alignment guaranteed:
 *
 *   +-------------+-----------+-----------+--------------------------------------------------+
 *   | u32 arg_len | arg bytes | u32 nkeys | nkeys x { u32 flags | u32 len | len value bytes } |
 *   +-------------+-----------+-----------+--------------------------------------------------+
 *   len == 0xFFFFFFFF (MNEMO_MISSING) marks a missing key: flags 0, no bytes follow.
 *   Entries are in request order. The arguments are raw bytes, not NUL-terminated.
 *
 * Output: the caller owns out->data, room for out->cap bytes. mnemo_filter returns
 *   0 (MNEMO_FILTER_OK)        out->data[0..out->len] is the result, out->flags its flags;
 *   1 (MNEMO_FILTER_ERROR)     out->data[0..out->len] is a UTF-8 message, cut to cap
 *                              (the server sanitizes it and keeps at most 200 bytes);
 *   2 (MNEMO_FILTER_TOO_LARGE) the result would not fit in cap bytes; out->len may tell the
 *                              size it needs (a hint), nothing in data is meaningful.
 * Any other value is treated as an error.
 *
 * Thread safety: mnemo_filter is called concurrently from several threads, each call with its
 * own input and output. It must be thread-safe: no unsynchronized global state. The input is
 * valid only during the call (keep no pointer into it); memory the filter allocates it frees
 * before returning.
 *
 * The static inline helpers below read the input with bounds checks: mnemo_input_parse
 * validates the whole buffer once, then a cursor walks the entries.
 */
#ifndef MNEMO_FILTER_H
#define MNEMO_FILTER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MNEMO_FILTER_ABI_VERSION 1

#define MNEMO_FILTER_OK 0
#define MNEMO_FILTER_ERROR 1
#define MNEMO_FILTER_TOO_LARGE 2

/* The length of a missing key's entry. */
#define MNEMO_MISSING 0xFFFFFFFFu

typedef struct mnemo_output { uint8_t *data; size_t cap; size_t len; uint32_t flags; } mnemo_output;

/* Returns MNEMO_FILTER_ABI_VERSION (1); the server refuses a library that returns anything else. */
uint32_t mnemo_abi_version(void);

/* Runs the filter over one request's input (layout above). Thread-safe; see above. */
int32_t  mnemo_filter(const uint8_t *input, size_t input_len, mnemo_output *out);

/* ---- helpers -------------------------------------------------------------------------- */

/* A validated input: the arguments and where the entries are. */
typedef struct mnemo_input {
    const uint8_t *args;    /* args_len bytes, not NUL-terminated */
    uint32_t args_len;
    uint32_t nkeys;         /* entries, missing keys included */
    const uint8_t *entries; /* the first entry header */
    size_t entries_len;     /* bytes from the first entry to the end of the input */
} mnemo_input;

/* One key's entry. For a missing key present is 0, flags 0, data NULL and len 0. */
typedef struct mnemo_entry {
    int present;
    uint32_t flags;
    const uint8_t *data;
    uint32_t len;
} mnemo_entry;

/* Walks the entries; see mnemo_input_entries and mnemo_cursor_next. */
typedef struct mnemo_cursor {
    const uint8_t *pos;
    const uint8_t *end;
    uint32_t left;
} mnemo_cursor;

/* Little-endian loads from unaligned bytes, whatever the host's byte order. */
static inline uint32_t mnemo_load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t mnemo_load_u64le(const uint8_t *p) {
    return (uint64_t)mnemo_load_u32le(p) | (uint64_t)mnemo_load_u32le(p + 4) << 32;
}

static inline void mnemo_store_u64le(uint8_t *p, uint64_t v) {
    int i;
    for (i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Reads the next entry into *e: 1 = read one, 0 = no entries left, -1 = malformed (an entry
 * runs past the end). Never reads outside [pos, end). */
static inline int mnemo_cursor_next(mnemo_cursor *c, mnemo_entry *e) {
    size_t room;
    uint32_t len;
    if (c->left == 0) return 0;
    room = (size_t)(c->end - c->pos);
    if (room < 8) return -1;
    len = mnemo_load_u32le(c->pos + 4);
    if (len == MNEMO_MISSING) {
        e->present = 0;
        e->flags = 0;
        e->data = NULL;
        e->len = 0;
        c->pos += 8;
    } else {
        if ((uint64_t)len > (uint64_t)(room - 8)) return -1;
        e->present = 1;
        e->flags = mnemo_load_u32le(c->pos);
        e->data = c->pos + 8;
        e->len = len;
        c->pos += 8 + (size_t)len;
    }
    c->left--;
    return 1;
}

/* A cursor at the first entry of a parsed input. */
static inline mnemo_cursor mnemo_input_entries(const mnemo_input *in) {
    mnemo_cursor c;
    c.pos = in->entries;
    c.end = in->entries + in->entries_len;
    c.left = in->nkeys;
    return c;
}

/* Validates the whole input (every length inside the buffer, no bytes left over) and fills
 * *in: 0 = valid, -1 = malformed. After it succeeds, mnemo_cursor_next never returns -1. */
static inline int mnemo_input_parse(const uint8_t *input, size_t input_len, mnemo_input *in) {
    size_t rest;
    uint32_t arg_len;
    mnemo_cursor c;
    mnemo_entry e;
    int r;
    if (input == NULL || input_len < 4) return -1;
    arg_len = mnemo_load_u32le(input);
    rest = input_len - 4;
    if ((uint64_t)arg_len > (uint64_t)rest) return -1;
    rest -= arg_len;
    if (rest < 4) return -1;
    in->args = input + 4;
    in->args_len = arg_len;
    in->nkeys = mnemo_load_u32le(input + 4 + arg_len);
    in->entries = input + 8 + arg_len;
    in->entries_len = rest - 4;
    /* Every entry has an 8-byte header: refuse an absurd count before walking it. */
    if ((uint64_t)in->nkeys * 8 > (uint64_t)in->entries_len) return -1;
    c = mnemo_input_entries(in);
    while ((r = mnemo_cursor_next(&c, &e)) == 1) {
    }
    if (r < 0 || c.pos != c.end) return -1;
    return 0;
}

/* Reports an error: copies msg (cut to out->cap on a UTF-8 character boundary) and returns
 * MNEMO_FILTER_ERROR, so `return mnemo_output_error(out, "...");` ends a filter. */
static inline int32_t mnemo_output_error(mnemo_output *out, const char *msg) {
    size_t n = strlen(msg);
    size_t cap = out->data == NULL ? 0 : out->cap;
    if (n > cap) {
        n = cap;
        /* Back off over continuation bytes so the cut does not split a character. */
        while (n > 0 && ((uint8_t)msg[n] & 0xC0) == 0x80) n--;
    }
    if (n > 0) memcpy(out->data, msg, n);
    out->len = n;
    out->flags = 0;
    return MNEMO_FILTER_ERROR;
}

/* Reports that the result needs `needed` bytes, more than out->cap: returns MNEMO_FILTER_TOO_LARGE. */
static inline int32_t mnemo_output_too_large(mnemo_output *out, size_t needed) {
    out->len = needed;
    out->flags = 0;
    return MNEMO_FILTER_TOO_LARGE;
}

#ifdef __cplusplus
}
#endif

#endif /* MNEMO_FILTER_H */

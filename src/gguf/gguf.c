/* gguf.c - reading and validating GGUF files (versions 2 and 3).
 *
 * The reader walks the header once, front to back. Every field is checked
 * against the bytes left before it is read, and every count is checked
 * against the least space its items could take in the file before anything
 * is allocated, so a hostile file can neither make us read out of bounds nor
 * allocate more than a small multiple of its own size.
 *
 * Layout of a file (all integers little-endian):
 *   magic "GGUF" | u32 version | u64 tensor count | u64 kv count
 *   kv pairs:     string key | u32 value type | value
 *   tensor infos: string name | u32 n_dims | u64 dims[n_dims] | u32 type | u64 offset
 *   padding to the alignment | tensor data (each tensor at data start + offset)
 * A string is a u64 length and that many bytes; an array is a u32 element
 * type, a u64 count and the items.
 *
 * Parsed values, tables and lookup indexes all live in one chunked arena
 * owned by the nu_gguf_file, so closing a file (or failing half-way) frees a
 * short list of chunks, and a 150k-entry vocabulary costs one allocation.
 */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* open, mmap and O_CLOEXEC under plain -std=c11 */
#endif
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "tensor_type.h"

#define GGUF_MAGIC 0x46554747u /* the bytes "GGUF" read as a little-endian u32 */
#define DEFAULT_ALIGNMENT 32
#define MAX_ARRAY_DEPTH 32  /* real files nest at most 2; bounds the recursion */
#define MAX_KEY_BYTES 65535 /* the specification's limit on key length */
#define MAX_ELEMENTS ((uint64_t)1 << 62)
#define MIN_KV_BYTES 13     /* u64 key length, a 1-byte key, u32 type, 1-byte value */
#define MIN_TENSOR_BYTES 32 /* u64 name length, u32 n_dims, one u64 dim, u32 type, u64 offset */
#define NOT_FOUND UINT64_MAX
#define ARENA_CHUNK_BYTES ((size_t)64 * 1024)

/* ------------------------------------------------------------------------ */
/* Arena and name index                                                     */
/* ------------------------------------------------------------------------ */

/* One block of arena memory; allocations are carved from data[] in order. */
typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used;
    size_t cap;
    max_align_t data[];
} arena_chunk;

/* An open-addressing hash table from names to entry numbers. Slots point at
 * the nu_gguf_string inside the kv or tensor table, which never moves. */
typedef struct name_slot {
    const nu_gguf_string *name; /* NULL: empty slot */
    uint64_t index;
} name_slot;

typedef struct name_index {
    name_slot *slots;
    uint64_t mask; /* capacity - 1; capacity is a power of two */
} name_index;

/* Everything a nu_gguf_file owns besides itself (nu_gguf_file.arena points here). */
typedef struct nu_gguf_store {
    arena_chunk *chunks; /* the first chunk is the one being filled */
    name_index keys;
    name_index tensors;
} nu_gguf_store;

/* Returns size bytes aligned for any type, or NULL when out of memory.
 * Large requests get a chunk of their own, linked behind the current one so
 * that the current chunk keeps serving small requests. */
static void *arena_alloc(nu_gguf_store *s, size_t size) {
    const size_t align = sizeof(max_align_t);
    if (size > SIZE_MAX - align) return NULL;
    size = (size + align - 1) / align * align;
    arena_chunk *c = s->chunks;
    if (c && c->cap - c->used >= size) {
        void *p = (char *)c->data + c->used;
        c->used += size;
        return p;
    }
    size_t cap = size > ARENA_CHUNK_BYTES / 4 ? size : ARENA_CHUNK_BYTES;
    if (cap > SIZE_MAX - sizeof(arena_chunk)) return NULL;
    arena_chunk *fresh = malloc(sizeof(arena_chunk) + cap);
    if (!fresh) return NULL;
    fresh->used = size;
    fresh->cap = cap;
    if (cap == size && c) { /* a dedicated chunk: keep filling the current one */
        fresh->next = c->next;
        c->next = fresh;
    } else {
        fresh->next = c;
        s->chunks = fresh;
    }
    return fresh->data;
}

/* Frees the store and every chunk it owns. */
static void store_free(nu_gguf_store *s) {
    if (!s) return;
    arena_chunk *c = s->chunks;
    while (c) {
        arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(s);
}

/* FNV-1a: simple, and good enough for a few thousand short names. */
static uint64_t hash_bytes(const char *p, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325u;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3u;
    return h;
}

/* Sizes an index for n names (at most half full, so probes stay short). */
static bool index_init(nu_gguf_store *s, name_index *ix, uint64_t n) {
    uint64_t cap = 8;
    while (cap < 2 * n) cap <<= 1;
    if (cap > SIZE_MAX / sizeof(name_slot)) return false;
    ix->slots = arena_alloc(s, (size_t)cap * sizeof(name_slot));
    if (!ix->slots) return false;
    memset(ix->slots, 0, (size_t)cap * sizeof(name_slot));
    ix->mask = cap - 1;
    return true;
}

/* Finds the entry named by n bytes at key; NOT_FOUND when absent. */
static uint64_t index_find(const name_index *ix, const char *key, uint64_t n) {
    if (!ix->slots) return NOT_FOUND;
    for (uint64_t at = hash_bytes(key, n) & ix->mask;; at = (at + 1) & ix->mask) {
        const name_slot *slot = &ix->slots[at];
        if (!slot->name) return NOT_FOUND;
        if (slot->name->len == n && memcmp(slot->name->data, key, n) == 0) return slot->index;
    }
}

/* Records name as entry i. Returns the entry that already has this name,
 * or NOT_FOUND when the name is new (duplicates are never inserted). */
static uint64_t index_insert(name_index *ix, const nu_gguf_string *name, uint64_t i) {
    for (uint64_t at = hash_bytes(name->data, name->len) & ix->mask;; at = (at + 1) & ix->mask) {
        name_slot *slot = &ix->slots[at];
        if (!slot->name) {
            slot->name = name;
            slot->index = i;
            return NOT_FOUND;
        }
        if (slot->name->len == name->len && memcmp(slot->name->data, name->data, name->len) == 0)
            return slot->index;
    }
}

/* ------------------------------------------------------------------------ */
/* The reader: a cursor over the file plus where we are, for messages       */
/* ------------------------------------------------------------------------ */

typedef struct reader {
    const uint8_t *data;
    uint64_t size;
    uint64_t pos;
    nu_gguf_store *store;
    nu_error *err;
    nu_status status;
    /* The place being read, named in error messages: section NULL means the
     * fixed header; otherwise "key" or "tensor" number index, its name once
     * known, and the item numbers of the arrays we are inside. */
    const char *section;
    uint64_t index;
    nu_gguf_string name;
    int depth;
    uint64_t item[MAX_ARRAY_DEPTH];
} reader;

typedef unsigned long long ull; /* for printf */

/* Copies a name for a message: at most 64 bytes, anything but printable
 * ASCII shown as '?', so a hostile name cannot break the one-line message. */
static void printable_name(nu_gguf_string s, char *buf, size_t cap) {
    size_t n = 0;
    for (uint64_t i = 0; i < s.len && n + 4 < cap && i < 64; i++) {
        unsigned char c = (unsigned char)s.data[i];
        buf[n++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (s.len > 64 && n + 4 <= cap) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = 0;
}

/* Appends printf output at *n in buf, never past cap. */
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    if (*n >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (k > 0) *n = *n + (size_t)k < cap ? *n + (size_t)k : cap - 1;
}

/* Names the place being read: "header", "key 12 'general.name'",
 * "key 3 'tokenizer.ggml.tokens' item [31999]". */
static void describe_place(const reader *r, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    if (!r->section) {
        append(buf, cap, &n, "header");
        return;
    }
    append(buf, cap, &n, "%s %llu", r->section, (ull)r->index);
    if (r->name.len) {
        char name[80];
        printable_name(r->name, name, sizeof name);
        append(buf, cap, &n, " '%s'", name);
    }
    if (r->depth > 0) {
        append(buf, cap, &n, " item ");
        for (int d = 0; d < r->depth; d++) append(buf, cap, &n, "[%llu]", (ull)r->item[d]);
    }
}

/* Records a format error "<place>: <detail>" (just the detail in the fixed
 * header, whose messages name their byte). Always returns false. */
static bool fail(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(reader *r, const char *fmt, ...) {
    char detail[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    r->status = NU_ERR_FORMAT;
    if (!r->section) {
        nu_fail(r->err, NU_ERR_FORMAT, "%s", detail);
    } else {
        char place[180];
        describe_place(r, place, sizeof place);
        nu_fail(r->err, NU_ERR_FORMAT, "%s: %s", place, detail);
    }
    return false;
}

/* Records an allocation failure. Always returns false. */
static bool fail_nomem(reader *r, uint64_t bytes) {
    char place[180];
    describe_place(r, place, sizeof place);
    r->status = NU_ERR_NOMEM;
    nu_fail(r->err, NU_ERR_NOMEM, "out of memory: %s needs %llu bytes of tables", place,
            (ull)bytes);
    return false;
}

/* Checks that n more bytes are in the file at the cursor. */
static bool need(reader *r, uint64_t n) {
    if (r->size - r->pos >= n) return true;
    char place[180];
    describe_place(r, place, sizeof place);
    r->status = NU_ERR_FORMAT;
    nu_fail(r->err, NU_ERR_FORMAT,
            "truncated: %s needs %llu bytes at byte %llu but the file ends at %llu", place, (ull)n,
            (ull)r->pos, (ull)r->size);
    return false;
}

/* Little-endian loads that work on any host and at any address. */
static uint16_t load_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t load_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t load_u64(const uint8_t *p) {
    return (uint64_t)load_u32(p) | (uint64_t)load_u32(p + 4) << 32;
}

/* Two's-complement reinterpretation of the low `bits` bits of x. */
static int64_t sign_extend(uint64_t x, unsigned bits) {
    uint64_t sign = (uint64_t)1 << (bits - 1);
    if (!(x & sign)) return (int64_t)x;
    return -(int64_t)(~x & (sign - 1)) - 1; /* never overflows, even for the minimum */
}

static bool read_u32(reader *r, uint32_t *out) {
    if (!need(r, 4)) return false;
    *out = load_u32(r->data + r->pos);
    r->pos += 4;
    return true;
}

static bool read_u64(reader *r, uint64_t *out) {
    if (!need(r, 8)) return false;
    *out = load_u64(r->data + r->pos);
    r->pos += 8;
    return true;
}

/* A string: u64 length, then the bytes (left in the file, not copied). */
static bool read_string(reader *r, nu_gguf_string *out) {
    uint64_t at = r->pos, len;
    if (!read_u64(r, &len)) return false;
    uint64_t left = r->size - r->pos;
    if (len > left)
        return fail(r, "string of %llu bytes at byte %llu cannot fit in the remaining %llu bytes",
                    (ull)len, (ull)at, (ull)left);
    out->data = (const char *)r->data + r->pos;
    out->len = len;
    r->pos += len;
    return true;
}

/* ------------------------------------------------------------------------ */
/* Metadata values                                                          */
/* ------------------------------------------------------------------------ */

/* Bytes of one scalar in the file; 0 for strings and arrays. */
static const uint8_t scalar_bytes[GGUF_TYPE_COUNT] = {
    [GGUF_UINT8] = 1,  [GGUF_INT8] = 1,  [GGUF_UINT16] = 2,  [GGUF_INT16] = 2,
    [GGUF_UINT32] = 4, [GGUF_INT32] = 4, [GGUF_FLOAT32] = 4, [GGUF_BOOL] = 1,
    [GGUF_UINT64] = 8, [GGUF_INT64] = 8, [GGUF_FLOAT64] = 8,
};

/* The fewest bytes one value of a type can take in a file. Bounding a count
 * by remaining / this bounds the memory a file can make us allocate. */
static uint64_t min_encoded_bytes(nu_gguf_value_type t) {
    if (t == GGUF_STRING) return 8; /* the length */
    if (t == GGUF_ARRAY) return 12; /* element type and count */
    return scalar_bytes[t];
}

/* Decodes one scalar (the caller has checked the bytes are there). */
static void decode_scalar(nu_gguf_value_type t, const uint8_t *p, nu_gguf_value *v) {
    v->type = t;
    switch (t) {
    case GGUF_UINT8:
    case GGUF_BOOL: v->v.u = p[0]; break;
    case GGUF_INT8: v->v.i = sign_extend(p[0], 8); break;
    case GGUF_UINT16: v->v.u = load_u16(p); break;
    case GGUF_INT16: v->v.i = sign_extend(load_u16(p), 16); break;
    case GGUF_UINT32: v->v.u = load_u32(p); break;
    case GGUF_INT32: v->v.i = sign_extend(load_u32(p), 32); break;
    case GGUF_UINT64: v->v.u = load_u64(p); break;
    case GGUF_INT64: v->v.i = sign_extend(load_u64(p), 64); break;
    case GGUF_FLOAT32: {
        uint32_t bits = load_u32(p);
        float f;
        memcpy(&f, &bits, sizeof f);
        v->v.f = f;
        break;
    }
    case GGUF_FLOAT64: {
        uint64_t bits = load_u64(p);
        memcpy(&v->v.f, &bits, sizeof v->v.f);
        break;
    }
    default: break; /* strings and arrays are not scalars */
    }
}

/* A u32 value type, checked to be one GGUF defines. */
static bool read_value_type(reader *r, nu_gguf_value_type *out) {
    uint64_t at = r->pos;
    uint32_t t;
    if (!read_u32(r, &t)) return false;
    if (t >= GGUF_TYPE_COUNT)
        return fail(r, "value type %u at byte %llu is not a GGUF type (0..%d)", t, (ull)at,
                    GGUF_TYPE_COUNT - 1);
    *out = (nu_gguf_value_type)t;
    return true;
}

/* Decodes n scalars whose bytes the caller has checked are all in the file.
 * This is the hot loop for big arrays (token scores and types). */
static bool read_scalar_items(reader *r, nu_gguf_value_type t, uint64_t n, nu_gguf_value *items) {
    const uint64_t width = scalar_bytes[t];
    const uint8_t *p = r->data + r->pos;
    for (uint64_t i = 0; i < n; i++, p += width) {
        if (t == GGUF_BOOL && p[0] > 1) {
            r->item[r->depth] = i;
            r->depth++;
            return fail(r, "bool value %u at byte %llu is not 0 or 1", p[0],
                        (ull)(r->pos + i * width));
        }
        decode_scalar(t, p, &items[i]);
    }
    r->pos += n * width;
    return true;
}

static bool read_value(reader *r, nu_gguf_value_type t, nu_gguf_value *out);

/* Reads the n items of a string or array array, tracking the item number
 * for messages. */
static bool read_compound_items(reader *r, nu_gguf_value_type t, uint64_t n, nu_gguf_value *items) {
    int d = r->depth++;
    for (uint64_t i = 0; i < n; i++) {
        r->item[d] = i;
        if (!read_value(r, t, &items[i])) return false;
    }
    r->depth--;
    return true;
}

/* An array: u32 element type, u64 count, items. The count is checked
 * against the bytes left before the items are allocated. */
static bool read_array(reader *r, nu_gguf_value *out) {
    if (r->depth >= MAX_ARRAY_DEPTH)
        return fail(r, "arrays nested deeper than %d levels at byte %llu", MAX_ARRAY_DEPTH,
                    (ull)r->pos);
    nu_gguf_value_type elem = GGUF_UINT8; /* set by read_value_type */
    uint64_t n;
    if (!read_value_type(r, &elem)) return false;
    uint64_t at = r->pos;
    if (!read_u64(r, &n)) return false;
    uint64_t left = r->size - r->pos;
    if (n > left / min_encoded_bytes(elem))
        return fail(r, "array of %llu items at byte %llu cannot fit in the remaining %llu bytes",
                    (ull)n, (ull)at, (ull)left);
    out->v.arr.elem_type = elem;
    out->v.arr.n = n;
    out->v.arr.items = NULL;
    out->v.arr.raw = scalar_bytes[elem] ? r->data + r->pos : NULL;
    if (n == 0) return true;
    if (n > SIZE_MAX / sizeof(nu_gguf_value)) return fail_nomem(r, UINT64_MAX);
    out->v.arr.items = arena_alloc(r->store, (size_t)n * sizeof(nu_gguf_value));
    if (!out->v.arr.items) return fail_nomem(r, n * sizeof(nu_gguf_value));
    if (scalar_bytes[elem]) return read_scalar_items(r, elem, n, out->v.arr.items);
    return read_compound_items(r, elem, n, out->v.arr.items);
}

/* One value of type t at the cursor. */
static bool read_value(reader *r, nu_gguf_value_type t, nu_gguf_value *out) {
    out->type = t;
    if (t == GGUF_STRING) return read_string(r, &out->v.s);
    if (t == GGUF_ARRAY) return read_array(r, out);
    if (!need(r, scalar_bytes[t])) return false;
    const uint8_t *p = r->data + r->pos;
    if (t == GGUF_BOOL && p[0] > 1)
        return fail(r, "bool value %u at byte %llu is not 0 or 1", p[0], (ull)r->pos);
    decode_scalar(t, p, out);
    r->pos += scalar_bytes[t];
    return true;
}

/* Points the message context at key i (its name unknown until read). */
static void enter(reader *r, const char *section, uint64_t i, nu_gguf_string name) {
    r->section = section;
    r->index = i;
    r->name = name;
    r->depth = 0;
}

/* One key-value pair; keys must be non-empty and unique. */
static bool read_kv(reader *r, uint64_t i, nu_gguf_kv *kv) {
    enter(r, "key", i, (nu_gguf_string){NULL, 0});
    uint64_t at = r->pos;
    if (!read_string(r, &kv->key)) return false;
    if (kv->key.len == 0) return fail(r, "empty key at byte %llu", (ull)at);
    r->name = kv->key;
    if (kv->key.len > MAX_KEY_BYTES)
        return fail(r, "key of %llu bytes at byte %llu is longer than %d bytes", (ull)kv->key.len,
                    (ull)at, MAX_KEY_BYTES);
    uint64_t dup = index_insert(&r->store->keys, &kv->key, i);
    if (dup != NOT_FOUND)
        return fail(r, "duplicates key %llu (the key starts at byte %llu)", (ull)dup, (ull)at);
    nu_gguf_value_type t = GGUF_UINT8; /* set by read_value_type */
    return read_value_type(r, &t) && read_value(r, t, &kv->value);
}

/* ------------------------------------------------------------------------ */
/* Header, tensor infos, data section                                       */
/* ------------------------------------------------------------------------ */

/* Swaps the bytes of a u32, to recognise a big-endian file's version. */
static uint32_t byte_swap32(uint32_t x) {
    return x >> 24 | (x >> 8 & 0xff00) | (x << 8 & 0xff0000) | x << 24;
}

/* Magic and version. */
static bool read_magic_version(reader *r, uint32_t *version) {
    uint32_t magic;
    if (!read_u32(r, &magic)) return false;
    if (magic != GGUF_MAGIC) return fail(r, "bad magic 0x%08x at byte 0 (not a GGUF file)", magic);
    if (!read_u32(r, version)) return false;
    if (*version == 1)
        return fail(r, "GGUF version 1 at byte 4 is not supported (an obsolete format; only "
                       "versions 2 and 3 are)");
    if (*version == 2 || *version == 3) return true;
    uint32_t swapped = byte_swap32(*version);
    if (swapped == 2 || swapped == 3)
        return fail(r,
                    "GGUF version %u at byte 4 looks big-endian (only little-endian files "
                    "are supported)",
                    *version);
    return fail(r, "unsupported GGUF version %u at byte 4 (only versions 2 and 3 are)", *version);
}

/* Magic, version and the two counts, which are checked against the bytes
 * left so that no later allocation can be absurd. */
static bool read_header(reader *r, nu_gguf_file *f) {
    if (!read_magic_version(r, &f->version)) return false;
    if (!read_u64(r, &f->n_tensors) || !read_u64(r, &f->n_kv)) return false;
    uint64_t left = r->size - r->pos;
    if (f->n_kv > left / MIN_KV_BYTES)
        return fail(r,
                    "kv count %llu at byte 16 cannot fit in the remaining %llu bytes (a key-value "
                    "pair takes at least %d)",
                    (ull)f->n_kv, (ull)left, MIN_KV_BYTES);
    left -= f->n_kv * MIN_KV_BYTES;
    if (f->n_tensors > left / MIN_TENSOR_BYTES)
        return fail(r,
                    "tensor count %llu at byte 8 cannot fit in the remaining %llu bytes (a tensor "
                    "entry takes at least %d)",
                    (ull)f->n_tensors, (ull)left, MIN_TENSOR_BYTES);
    return true;
}

/* All key-value pairs, in file order. */
static bool read_kvs(reader *r, nu_gguf_file *f) {
    if (!index_init(r->store, &r->store->keys, f->n_kv)) return fail_nomem(r, f->n_kv * 16);
    if (f->n_kv == 0) return true;
    f->kv = arena_alloc(r->store, (size_t)f->n_kv * sizeof(nu_gguf_kv));
    if (!f->kv) return fail_nomem(r, f->n_kv * sizeof(nu_gguf_kv));
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (!read_kv(r, i, &f->kv[i])) return false;
    return true;
}

/* general.alignment, when present, must be a nonzero power of two u32. */
static bool apply_alignment(reader *r, nu_gguf_file *f) {
    f->alignment = DEFAULT_ALIGNMENT;
    static const char key[] = "general.alignment";
    uint64_t i = index_find(&r->store->keys, key, sizeof key - 1);
    if (i == NOT_FOUND) return true;
    const nu_gguf_value *v = &f->kv[i].value;
    enter(r, "key", i, f->kv[i].key);
    if (v->type != GGUF_UINT32)
        return fail(r, "the alignment must be a u32, not a %s", nu_gguf_type_name(v->type));
    if (v->v.u == 0 || (v->v.u & (v->v.u - 1)) != 0)
        return fail(r, "alignment %llu is not a nonzero power of two", (ull)v->v.u);
    f->alignment = v->v.u;
    return true;
}

/* n_dims and the dimensions: each > 0, the product at most 2^62. */
static bool read_dims(reader *r, nu_gguf_tensor *t) {
    uint64_t at = r->pos;
    if (!read_u32(r, &t->n_dims)) return false;
    if (t->n_dims < 1 || t->n_dims > 4)
        return fail(r, "n_dims %u at byte %llu is not in 1..4", t->n_dims, (ull)at);
    uint64_t count = 1;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t dim;
        at = r->pos;
        if (!read_u64(r, &dim)) return false;
        if (dim == 0) return fail(r, "dimension %u at byte %llu is 0", d, (ull)at);
        if (dim > MAX_ELEMENTS / count)
            return fail(r, "dimension %u (%llu) at byte %llu makes more than 2^62 elements", d,
                        (ull)dim, (ull)at);
        count *= dim;
        t->ne[d] = (int64_t)dim;
    }
    t->n_elements = count;
    return true;
}

/* The element type (known, and dividing the row into whole blocks), the
 * offset (aligned) and the size in bytes (not overflowing). */
static bool read_type_offset(reader *r, uint64_t alignment, nu_gguf_tensor *t) {
    uint64_t at = r->pos;
    if (!read_u32(r, &t->type)) return false;
    const nu_type_traits *tt = nu_type_get(t->type);
    if (!tt->name) return fail(r, "unknown tensor type %u at byte %llu", t->type, (ull)at);
    uint64_t row = (uint64_t)t->ne[0];
    if (row % tt->block_size)
        return fail(r, "row length %llu is not a multiple of the %s block size %u", (ull)row,
                    tt->name, tt->block_size);
    at = r->pos;
    if (!read_u64(r, &t->offset)) return false;
    if (t->offset % alignment)
        return fail(r, "offset %llu at byte %llu is not a multiple of the alignment %llu",
                    (ull)t->offset, (ull)at, (ull)alignment);
    uint64_t rows = t->n_elements / row;
    if (row / tt->block_size > UINT64_MAX / tt->block_bytes) return fail(r, "row size overflows");
    uint64_t row_bytes = nu_type_row_bytes(t->type, row);
    if (rows > UINT64_MAX / row_bytes)
        return fail(r, "size of %llu rows of %llu bytes overflows", (ull)rows, (ull)row_bytes);
    t->n_bytes = row_bytes * rows;
    return true;
}

/* One tensor info; names must be unique. */
static bool read_tensor_info(reader *r, uint64_t i, uint64_t alignment, nu_gguf_tensor *t) {
    enter(r, "tensor", i, (nu_gguf_string){NULL, 0});
    uint64_t at = r->pos;
    if (!read_string(r, &t->name)) return false;
    r->name = t->name;
    uint64_t dup = index_insert(&r->store->tensors, &t->name, i);
    if (dup != NOT_FOUND)
        return fail(r, "duplicates tensor %llu (the name starts at byte %llu)", (ull)dup, (ull)at);
    t->data = NULL;
    return read_dims(r, t) && read_type_offset(r, alignment, t);
}

/* All tensor infos. The count is checked again now that the metadata's
 * size is known. */
static bool read_tensor_infos(reader *r, nu_gguf_file *f) {
    enter(r, NULL, 0, (nu_gguf_string){NULL, 0});
    uint64_t left = r->size - r->pos;
    if (f->n_tensors > left / MIN_TENSOR_BYTES)
        return fail(r,
                    "tensor count %llu at byte 8 cannot fit in the %llu bytes left after the "
                    "metadata (a tensor entry takes at least %d)",
                    (ull)f->n_tensors, (ull)left, MIN_TENSOR_BYTES);
    if (!index_init(r->store, &r->store->tensors, f->n_tensors))
        return fail_nomem(r, f->n_tensors * 16);
    if (f->n_tensors == 0) return true;
    f->tensors = arena_alloc(r->store, (size_t)f->n_tensors * sizeof(nu_gguf_tensor));
    if (!f->tensors) return fail_nomem(r, f->n_tensors * sizeof(nu_gguf_tensor));
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (!read_tensor_info(r, i, f->alignment, &f->tensors[i])) return false;
    return true;
}

/* The data section starts at the header's end rounded up to the alignment;
 * every tensor's bytes must lie inside the file. */
static bool place_tensor_data(reader *r, nu_gguf_file *f) {
    f->data_offset = (r->pos + f->alignment - 1) / f->alignment * f->alignment;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        nu_gguf_tensor *t = &f->tensors[i];
        enter(r, "tensor", i, t->name);
        uint64_t start = f->data_offset + t->offset;
        if (t->offset > UINT64_MAX - f->data_offset || t->n_bytes > UINT64_MAX - start)
            return fail(
                r, "data of %llu bytes at offset %llu runs past the end of the file (%llu bytes)",
                (ull)t->n_bytes, (ull)t->offset, (ull)f->size);
        if (start + t->n_bytes > f->size)
            return fail(r, "data ends at byte %llu, past the end of the file (%llu bytes)",
                        (ull)(start + t->n_bytes), (ull)f->size);
        t->data = f->base + start;
    }
    return true;
}

/* Parses a whole file image. On failure nothing is left allocated. */
static nu_status parse_image(const uint8_t *data, uint64_t size, nu_gguf_file **out,
                             nu_error *err) {
    nu_gguf_file *f = calloc(1, sizeof *f);
    nu_gguf_store *s = calloc(1, sizeof *s);
    if (!f || !s) {
        free(f);
        free(s);
        return nu_fail(err, NU_ERR_NOMEM, "out of memory opening a GGUF file");
    }
    f->arena = s;
    f->base = data;
    f->size = size;
    reader r = {.data = data, .size = size, .store = s, .err = err, .status = NU_OK};
    bool ok = read_header(&r, f) && read_kvs(&r, f) && apply_alignment(&r, f) &&
              read_tensor_infos(&r, f) && place_tensor_data(&r, f);
    if (!ok) {
        store_free(s);
        free(f);
        return r.status;
    }
    *out = f;
    return NU_OK;
}

/* ------------------------------------------------------------------------ */
/* Opening and closing                                                      */
/* ------------------------------------------------------------------------ */

nu_status nu_gguf_open_memory(const void *data, size_t size, nu_gguf_file **out, nu_error *err) {
    if (!out) return nu_fail(err, NU_ERR_INVALID_ARG, "nu_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size) return nu_fail(err, NU_ERR_INVALID_ARG, "nu_gguf_open_memory: data is NULL");
    return parse_image(data, size, out, err);
}

/* Puts "path: " in front of the message a parse failure left in err. */
static void prefix_path(nu_error *err, const char *path) {
    if (!err) return;
    char msg[sizeof err->message];
    memcpy(msg, err->message, sizeof msg);
    msg[sizeof msg - 1] = 0;
    nu_fail(err, err->status, "%s: %s", path, msg);
}

/* Maps the whole file read-only. Empty files are not mapped (mmap refuses
 * length 0); they then fail parsing as truncated. */
static nu_status map_file(const char *path, const uint8_t **base, uint64_t *size, nu_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nu_fail(err, NU_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    nu_status status = NU_OK;
    if (fstat(fd, &st) != 0) {
        status = nu_fail(err, NU_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        status = nu_fail(err, NU_ERR_IO, "%s is not a regular file", path);
    } else if ((uint64_t)st.st_size > SIZE_MAX) {
        status = nu_fail(err, NU_ERR_IO, "%s is too large to map", path);
    } else {
        *size = (uint64_t)st.st_size;
        *base = NULL;
        if (*size > 0) {
            void *p = mmap(NULL, (size_t)*size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED)
                status = nu_fail(err, NU_ERR_IO, "cannot map %s: %s", path, strerror(errno));
            else
                *base = p;
        }
    }
    close(fd);
    return status;
}

nu_status nu_gguf_open(const char *path, nu_gguf_file **out, nu_error *err) {
    if (!out) return nu_fail(err, NU_ERR_INVALID_ARG, "nu_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return nu_fail(err, NU_ERR_INVALID_ARG, "nu_gguf_open: path is NULL");
    const uint8_t *base = NULL;
    uint64_t size = 0;
    nu_status status = map_file(path, &base, &size, err);
    if (status != NU_OK) return status;
    status = parse_image(base, size, out, err);
    if (status != NU_OK) {
        if (base) munmap((void *)base, (size_t)size);
        prefix_path(err, path);
        return status;
    }
    (*out)->mapped = base != NULL;
    return NU_OK;
}

void nu_gguf_close(nu_gguf_file *f) {
    if (!f) return;
    if (f->mapped) munmap((void *)f->base, (size_t)f->size);
    store_free(f->arena);
    free(f);
}

/* ------------------------------------------------------------------------ */
/* Lookups                                                                  */
/* ------------------------------------------------------------------------ */

const nu_gguf_value *nu_gguf_find(const nu_gguf_file *f, const char *key) {
    if (!f || !key) return NULL;
    const nu_gguf_store *s = f->arena;
    uint64_t i = index_find(&s->keys, key, strlen(key));
    return i == NOT_FOUND ? NULL : &f->kv[i].value;
}

const nu_gguf_tensor *nu_gguf_find_tensor(const nu_gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    const nu_gguf_store *s = f->arena;
    uint64_t i = index_find(&s->tensors, name, strlen(name));
    return i == NOT_FOUND ? NULL : &f->tensors[i];
}

/* Any integer value as sign and magnitude: *negative set when it is below
 * zero (then *neg holds it), else *pos holds it. False for non-integers. */
static bool integer_value(const nu_gguf_value *v, bool *negative, uint64_t *pos, int64_t *neg) {
    if (!v) return false;
    switch (v->type) {
    case GGUF_UINT8:
    case GGUF_UINT16:
    case GGUF_UINT32:
    case GGUF_UINT64:
        *negative = false;
        *pos = v->v.u;
        return true;
    case GGUF_INT8:
    case GGUF_INT16:
    case GGUF_INT32:
    case GGUF_INT64:
        *negative = v->v.i < 0;
        if (*negative)
            *neg = v->v.i;
        else
            *pos = (uint64_t)v->v.i;
        return true;
    default: return false;
    }
}

bool nu_gguf_get_u32(const nu_gguf_file *f, const char *key, uint32_t *out) {
    bool negative;
    uint64_t pos = 0;
    int64_t neg = 0;
    if (!integer_value(nu_gguf_find(f, key), &negative, &pos, &neg)) return false;
    if (negative || pos > UINT32_MAX) return false;
    *out = (uint32_t)pos;
    return true;
}

bool nu_gguf_get_i32(const nu_gguf_file *f, const char *key, int32_t *out) {
    bool negative;
    uint64_t pos = 0;
    int64_t neg = 0;
    if (!integer_value(nu_gguf_find(f, key), &negative, &pos, &neg)) return false;
    if (negative ? neg < INT32_MIN : pos > INT32_MAX) return false;
    *out = negative ? (int32_t)neg : (int32_t)pos;
    return true;
}

bool nu_gguf_get_u64(const nu_gguf_file *f, const char *key, uint64_t *out) {
    bool negative;
    uint64_t pos = 0;
    int64_t neg = 0;
    if (!integer_value(nu_gguf_find(f, key), &negative, &pos, &neg) || negative) return false;
    *out = pos;
    return true;
}

/* FLOAT32 exactly; FLOAT64 rounded to float unless it is out of float range. */
bool nu_gguf_get_f32(const nu_gguf_file *f, const char *key, float *out) {
    const nu_gguf_value *v = nu_gguf_find(f, key);
    if (!v || (v->type != GGUF_FLOAT32 && v->type != GGUF_FLOAT64)) return false;
    if (isfinite(v->v.f) && fabs(v->v.f) > FLT_MAX) return false;
    *out = (float)v->v.f;
    return true;
}

bool nu_gguf_get_bool(const nu_gguf_file *f, const char *key, bool *out) {
    const nu_gguf_value *v = nu_gguf_find(f, key);
    if (!v || v->type != GGUF_BOOL) return false;
    *out = v->v.u != 0;
    return true;
}

bool nu_gguf_get_str(const nu_gguf_file *f, const char *key, nu_gguf_string *out) {
    const nu_gguf_value *v = nu_gguf_find(f, key);
    if (!v || v->type != GGUF_STRING) return false;
    *out = v->v.s;
    return true;
}

const nu_gguf_value *nu_gguf_get_arr(const nu_gguf_file *f, const char *key,
                                     nu_gguf_value_type elem_type) {
    const nu_gguf_value *v = nu_gguf_find(f, key);
    if (!v || v->type != GGUF_ARRAY || v->v.arr.elem_type != elem_type) return NULL;
    return v;
}

bool nu_gguf_str_eq(nu_gguf_string s, const char *c) {
    if (!c) return false;
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.data, c, n) == 0);
}

const char *nu_gguf_type_name(nu_gguf_value_type t) {
    static const char *const names[GGUF_TYPE_COUNT] = {
        [GGUF_UINT8] = "u8",    [GGUF_INT8] = "i8",   [GGUF_UINT16] = "u16",  [GGUF_INT16] = "i16",
        [GGUF_UINT32] = "u32",  [GGUF_INT32] = "i32", [GGUF_FLOAT32] = "f32", [GGUF_BOOL] = "bool",
        [GGUF_STRING] = "str",  [GGUF_ARRAY] = "arr", [GGUF_UINT64] = "u64",  [GGUF_INT64] = "i64",
        [GGUF_FLOAT64] = "f64",
    };
    if ((unsigned)t >= GGUF_TYPE_COUNT) return "?";
    return names[t];
}

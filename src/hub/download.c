/*
 * download.c - models by name: "hf:ORG/REPO[@REVISION]/PATH" references, the
 * local model cache, and resumable downloads checked against their SHA-256.
 *
 * A reference names one file of a Hugging Face repository (REVISION defaults
 * to "main"; PATH may contain slashes). Its cache entry is
 *
 *     <cache>/hf/ORG/REPO/REVISION/PATH         the verified file
 *     <cache>/hf/ORG/REPO/REVISION/PATH.meta    sidecar: size, SHA-256, URL
 *     <cache>/hf/ORG/REPO/REVISION/PATH.part    a download in progress
 *     <cache>/hf/ORG/REPO/REVISION/PATH.lock    serialises downloads of it (only
 *                                               while one runs)
 *
 * A file whose sidecar exists and agrees with the file's size is used as is,
 * without any network access (a revision such as "main" is therefore not
 * refreshed: delete the file to fetch it again). Otherwise the file is
 * fetched from <endpoint>/ORG/REPO/resolve/REVISION/PATH:
 *
 *   1. A HEAD request that does not follow redirects learns the expected size
 *      and SHA-256. Hugging Face answers it, for files stored with Git LFS
 *      (all GGUF files), with a redirect carrying X-Linked-Size and
 *      X-Linked-ETag (the quoted SHA-256). Otherwise Content-Length and an
 *      ETag of 64 hex digits are used (after following redirects).
 *   2. A GET, following redirects, appends to PATH.part while the SHA-256 is
 *      computed. An existing .part is resumed with a Range request (its bytes
 *      are hashed first); a server that ignores the Range and sends the whole
 *      file makes the download restart from zero.
 *   3. Size and SHA-256 are compared with what the server announced; a
 *      mismatch deletes the .part. The sidecar is written and the .part
 *      renamed into place, atomically.
 *
 * A download that fails leaves no lock file and no empty directories: only a
 * .part worth resuming stays. A server that cannot be reached at all gets a
 * message saying what to do without network.
 *
 * When the server announces no SHA-256 (files outside Git LFS, other hosts),
 * the file is downloaded anyway, checked by its size when that is known, and
 * the SHA-256 it turned out to have is recorded in the sidecar. Such a
 * download is never resumed, since nothing could check the joined result.
 */
#include "error.h"
#include "nucleus.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

enum {
    DL_PATH_MAX = 4096,     /* longest cache path or URL */
    HF_NAME_MAX = 96,       /* longest organisation or repository name */
    HF_REV_MAX = 128,       /* longest revision (a branch, tag or commit) */
    HF_FILE_MAX = 1024,     /* longest PATH inside the repository */
    LOW_SPEED_BYTES = 1024, /* abort a transfer slower than this many bytes/s ... */
    LOW_SPEED_SECONDS = 60, /* ... for this long (instead of a total timeout) */
    CONNECT_SECONDS = 30,
    MAX_REDIRECTS = 10,
    HASH_CHUNK = 1 << 20, /* bytes read at a time when hashing a .part */
    LOCK_ATTEMPTS = 100,  /* lock files replaced under us before lock_entry gives up */
};

#define SHA256_HEX_LEN 64
#define HF_DEFAULT_ENDPOINT "https://huggingface.co"
#define HF_REF_PREFIX "hf:"
#define HF_REF_FORM "hf:ORG/REPO[@REVISION]/PATH/TO/FILE"

/* A parsed reference. */
typedef struct hf_ref {
    char org[HF_NAME_MAX + 1];
    char repo[HF_NAME_MAX + 1];
    char rev[HF_REV_MAX + 1];
    char file[HF_FILE_MAX + 1]; /* PATH: '/'-separated segments */
} hf_ref;

/* Where one reference lives, in the cache and on the server. */
typedef struct cache_entry {
    char file[DL_PATH_MAX];
    char part[DL_PATH_MAX + 8]; /* file + ".part" */
    char meta[DL_PATH_MAX + 8];
    char lock[DL_PATH_MAX + 8];
    char url[DL_PATH_MAX];
} cache_entry;

/* What is known about a file's content: announced by a server or recorded
 * in a sidecar. */
typedef struct file_facts {
    bool size_known;
    uint64_t size;
    char sha256[SHA256_HEX_LEN + 1]; /* lower-case hex, "" when unknown */
} file_facts;

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

/* Copies s into buf with its NUL, or reports how much room it needs. */
static nu_status copy_out(char *buf, size_t cap, const char *s, const char *what, nu_error *err) {
    size_t n = strlen(s);
    if (!buf || n >= cap)
        return nu_fail(err, NU_ERR_BUFFER_SMALL, "%s needs a buffer of %zu bytes, got %zu", what,
                       n + 1, cap);
    memcpy(buf, s, n + 1);
    return NU_OK;
}

/* True when s is exactly 64 hex digits. */
static bool is_sha256_hex(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    }
    return n == SHA256_HEX_LEN;
}

/* Copies a 64-hex-digit string into out in lower case, or leaves out empty
 * when s is anything else (an MD5 or git SHA-1 ETag, say). */
static void take_sha256(char out[SHA256_HEX_LEN + 1], const char *s) {
    out[0] = 0;
    if (!is_sha256_hex(s)) return;
    for (int i = 0; i <= SHA256_HEX_LEN; i++)
        out[i] = (char)((s[i] >= 'A' && s[i] <= 'F') ? s[i] - 'A' + 'a' : s[i]);
}

/* Writes the hex form of a digest. */
static void digest_hex(const unsigned char *md, unsigned len, char *out) {
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < len; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[2 * len] = 0;
}

/* Parses a decimal uint64 that makes up all of s; false otherwise. */
static bool parse_u64(const char *s, uint64_t *out) {
    if (*s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

/* ------------------------------------------------------------------------ */
/* The cache directory and references                                       */
/* ------------------------------------------------------------------------ */

nu_status nu_cache_dir(char *buf, size_t cap, nu_error *err) {
    const char *own = getenv("NUCLEUS_CACHE");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    char dir[DL_PATH_MAX];
    int n;
    if (own && *own)
        n = snprintf(dir, sizeof dir, "%s", own);
    else if (xdg && xdg[0] == '/')
        n = snprintf(dir, sizeof dir, "%s/nucleus", xdg); /* XDG: absolute only */
    else if (home && *home)
        n = snprintf(dir, sizeof dir, "%s/.cache/nucleus", home);
    else
        return nu_fail(err, NU_ERR_INVALID_ARG, "no cache directory: set NUCLEUS_CACHE or HOME");
    if (n < 0 || (size_t)n >= sizeof dir)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the cache directory path is too long");
    while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
    return copy_out(buf, cap, dir, "the cache directory", err);
}

/* Any "hf:" string counts as a reference, so that a malformed one gets a
 * precise error from nu_resolve_model instead of "no such file". (A local
 * file with such a name can be given as "./hf:...".) */
bool nu_is_model_ref(const char *ref) {
    return ref && strncmp(ref, HF_REF_PREFIX, strlen(HF_REF_PREFIX)) == 0;
}

/* Characters allowed in every part of a reference: enough for real
 * repository and file names, and none that needs escaping in a URL or that
 * means anything to a file system or a shell. */
static bool ref_char_ok(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '+';
}

/* Fails with a message naming the reference, the problem and the form. */
static nu_status bad_ref(const char *ref, const char *why, nu_error *err) {
    return nu_fail(err, NU_ERR_INVALID_ARG, "invalid model reference \"%.200s\": %s (expected %s)",
                   ref, why, HF_REF_FORM);
}

/* Checks one '/'-free part [s, s+n) and copies it into dst (cap bytes):
 * not empty, not "." or "..", allowed characters only. */
static nu_status take_part(char *dst, size_t cap, const char *s, size_t n, const char *what,
                           const char *ref, nu_error *err) {
    char why[96];
    if (n == 0)
        snprintf(why, sizeof why, "the %s is empty", what);
    else if (n >= cap)
        snprintf(why, sizeof why, "the %s is too long", what);
    else if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        snprintf(why, sizeof why, "'%.*s' is not allowed in the %s", (int)n, s, what);
    else
        why[0] = 0;
    for (size_t i = 0; !why[0] && i < n; i++)
        if (!ref_char_ok(s[i]))
            snprintf(why, sizeof why, "character '%c' (0x%02x) is not allowed in the %s",
                     s[i] > 32 && s[i] < 127 ? s[i] : '?', (unsigned char)s[i], what);
    if (why[0]) return bad_ref(ref, why, err);
    memcpy(dst, s, n);
    dst[n] = 0;
    return NU_OK;
}

/* True when name ends with suffix. */
static bool ends_with(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* Checks and copies PATH segment by segment. Names that end like the
 * cache's own sidecar files are refused so that no two references share a
 * cache file. */
static nu_status take_file_path(hf_ref *out, const char *s, const char *ref, nu_error *err) {
    size_t used = 0;
    for (;;) {
        const char *slash = strchr(s, '/');
        size_t n = slash ? (size_t)(slash - s) : strlen(s);
        if (used + n + 1 > sizeof out->file) return bad_ref(ref, "the file path is too long", err);
        nu_status st =
            take_part(out->file + used, sizeof out->file - used, s, n, "file path", ref, err);
        if (st) return st;
        used += n;
        if (!slash) break;
        out->file[used++] = '/';
        s = slash + 1;
    }
    if (ends_with(out->file, ".part") || ends_with(out->file, ".meta") ||
        ends_with(out->file, ".lock"))
        return bad_ref(ref, "file names ending in .part, .meta or .lock are reserved", err);
    return NU_OK;
}

/* Parses "hf:ORG/REPO[@REVISION]/PATH". */
static nu_status parse_hf_ref(const char *ref, hf_ref *out, nu_error *err) {
    const char *s = ref + strlen(HF_REF_PREFIX);
    const char *slash = strchr(s, '/');
    if (!slash) return bad_ref(ref, "no repository", err);
    nu_status st =
        take_part(out->org, sizeof out->org, s, (size_t)(slash - s), "organisation", ref, err);
    if (st) return st;
    s = slash + 1;
    slash = strchr(s, '/');
    if (!slash) return bad_ref(ref, "no file path", err);
    const char *at = memchr(s, '@', (size_t)(slash - s));
    const char *repo_end = at ? at : slash;
    st = take_part(out->repo, sizeof out->repo, s, (size_t)(repo_end - s), "repository", ref, err);
    if (st) return st;
    if (at)
        st = take_part(out->rev, sizeof out->rev, at + 1, (size_t)(slash - at - 1), "revision", ref,
                       err);
    else
        snprintf(out->rev, sizeof out->rev, "main");
    if (st) return st;
    return take_file_path(out, slash + 1, ref, err);
}

/* The server: $NUCLEUS_HF_ENDPOINT or huggingface.co, without trailing
 * slashes; *len receives the length to use. */
static nu_status hf_endpoint(const char **out, int *len, nu_error *err) {
    const char *ep = getenv("NUCLEUS_HF_ENDPOINT");
    if (!ep || !*ep) ep = HF_DEFAULT_ENDPOINT;
    if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0)
        return nu_fail(err, NU_ERR_INVALID_ARG,
                       "NUCLEUS_HF_ENDPOINT must start with http:// or https://, got \"%.200s\"",
                       ep);
    size_t n = strlen(ep);
    while (n > 0 && ep[n - 1] == '/') n--;
    if (n > 1024) return nu_fail(err, NU_ERR_INVALID_ARG, "NUCLEUS_HF_ENDPOINT is too long");
    *out = ep;
    *len = (int)n;
    return NU_OK;
}

/* Fills in the cache paths and the download URL of a reference. */
static nu_status cache_entry_for(const hf_ref *r, cache_entry *e, nu_error *err) {
    char cache[DL_PATH_MAX];
    nu_status st = nu_cache_dir(cache, sizeof cache, err);
    if (st) return st;
    const char *ep = NULL;
    int ep_len = 0;
    st = hf_endpoint(&ep, &ep_len, err);
    if (st) return st;
    int n = snprintf(e->file, sizeof e->file, "%s/hf/%s/%s/%s/%s", cache, r->org, r->repo, r->rev,
                     r->file);
    if (n < 0 || (size_t)n >= sizeof e->file)
        return nu_fail(err, NU_ERR_INVALID_ARG, "the cache path for %s/%s/%s is too long", r->org,
                       r->repo, r->file);
    snprintf(e->part, sizeof e->part, "%s.part", e->file);
    snprintf(e->meta, sizeof e->meta, "%s.meta", e->file);
    snprintf(e->lock, sizeof e->lock, "%s.lock", e->file);
    snprintf(e->url, sizeof e->url, "%.*s/%s/%s/resolve/%s/%s", ep_len, ep, r->org, r->repo, r->rev,
             r->file);
    return NU_OK;
}

/* ------------------------------------------------------------------------ */
/* The cache on disk                                                        */
/* ------------------------------------------------------------------------ */

/* Creates every missing directory above path, like `mkdir -p $(dirname path)`.
 * Another thread or process pruning the same directories after its failed
 * download can remove a parent between two mkdir calls (ENOENT): then the
 * walk starts again from the top, a bounded number of times. */
static nu_status make_parent_dirs(const char *path, nu_error *err) {
    char buf[DL_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (int attempt = 0; attempt < LOCK_ATTEMPTS; attempt++) {
        bool pruned = false;
        for (char *p = buf + 1; *p && !pruned; p++) {
            if (*p != '/') continue;
            *p = 0;
            int rc = mkdir(buf, 0755);
            int e2 = errno;
            *p = '/';
            if (rc == 0 || e2 == EEXIST) continue;
            if (e2 != ENOENT) {
                *p = 0;
                return nu_fail(err, NU_ERR_IO, "cannot create directory %s: %s", buf, strerror(e2));
            }
            pruned = true;
        }
        if (!pruned) return NU_OK;
    }
    return nu_fail(err, NU_ERR_IO, "cannot create the directories of %s: they keep being removed",
                   path);
}

/* Reads a sidecar: "nucleus-cache 1", then "size N", "sha256 HEX" and
 * "url URL" lines. False when it is missing or malformed. */
static bool read_sidecar(const char *path, file_facts *out) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[DL_PATH_MAX + 16];
    bool header = fgets(line, sizeof line, f) && strcmp(line, "nucleus-cache 1\n") == 0;
    memset(out, 0, sizeof *out);
    while (header && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, "size ", 5) == 0)
            out->size_known = parse_u64(line + 5, &out->size);
        else if (strncmp(line, "sha256 ", 7) == 0)
            take_sha256(out->sha256, line + 7);
    }
    fclose(f);
    return header && out->size_known && out->sha256[0];
}

/* Writes the sidecar of a verified file. */
static nu_status write_sidecar(const cache_entry *e, const file_facts *facts, nu_error *err) {
    FILE *f = fopen(e->meta, "w");
    if (!f) return nu_fail(err, NU_ERR_IO, "cannot write %s: %s", e->meta, strerror(errno));
    fprintf(f, "nucleus-cache 1\nsize %" PRIu64 "\nsha256 %s\nurl %s\n", facts->size, facts->sha256,
            e->url);
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) return nu_fail(err, NU_ERR_IO, "cannot write %s: %s", e->meta, strerror(errno));
    return NU_OK;
}

/* True when the file is in the cache: present, with a sidecar whose size
 * agrees. (The content was checked when it was downloaded; hashing a large
 * model on every start would cost more than it protects.) */
static bool cache_hit(const cache_entry *e) {
    struct stat st;
    file_facts meta;
    if (stat(e->file, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    return read_sidecar(e->meta, &meta) && (uint64_t)st.st_size == meta.size;
}

/* Takes an exclusive lock on PATH.lock so that two processes (or threads)
 * fetching the same file never write the same .part. The lock file exists
 * only while someone holds it: unlock_entry deletes it before letting go, so
 * a waiter that wakes up holding a deleted file opens the path again (and
 * recreates the directories if a failed download pruned them meanwhile). */
static nu_status lock_entry(const cache_entry *e, int *fd_out, nu_error *err) {
    for (int attempt = 0; attempt < LOCK_ATTEMPTS; attempt++) {
        int fd = open(e->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 && errno == ENOENT) {
            nu_status st = make_parent_dirs(e->file, err);
            if (st) return st;
            continue;
        }
        if (fd < 0) return nu_fail(err, NU_ERR_IO, "cannot open %s: %s", e->lock, strerror(errno));
        int rc;
        while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
        }
        if (rc != 0) {
            int e2 = errno;
            close(fd);
            return nu_fail(err, NU_ERR_IO, "cannot lock %s: %s", e->lock, strerror(e2));
        }
        struct stat held, named;
        if (fstat(fd, &held) == 0 && stat(e->lock, &named) == 0 && held.st_dev == named.st_dev &&
            held.st_ino == named.st_ino) {
            *fd_out = fd;
            return NU_OK;
        }
        close(fd); /* the previous holder deleted it: lock the file now at the path */
    }
    return nu_fail(err, NU_ERR_IO, "cannot lock %s: it keeps being replaced", e->lock);
}

/* Deletes the lock file, then releases the lock (see lock_entry). */
static void unlock_entry(const cache_entry *e, int fd) {
    unlink(e->lock);
    close(fd);
}

/* Removes the entry's directories that a failed download left empty, from
 * the deepest up to <cache>/hf; rmdir refuses non-empty ones, so a kept
 * .part, another file or another process's entry stops it. */
static void prune_empty_dirs(const cache_entry *e) {
    char cache[DL_PATH_MAX], dir[DL_PATH_MAX];
    if (nu_cache_dir(cache, sizeof cache, NULL) != NU_OK) return;
    size_t root = strlen(cache);
    snprintf(dir, sizeof dir, "%s", e->file);
    for (;;) {
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) <= root) return; /* never the cache itself */
        *slash = 0;
        if (rmdir(dir) != 0) return;
    }
}

/* ------------------------------------------------------------------------ */
/* HTTP with libcurl                                                        */
/* ------------------------------------------------------------------------ */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result = CURLE_FAILED_INIT;

/* curl_global_init is not thread-safe on every platform: run it once. */
static void curl_init_once(void) {
    curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static nu_status curl_ready(nu_error *err) {
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_result != CURLE_OK)
        return nu_fail(err, NU_ERR_NETWORK, "cannot initialise libcurl: %s",
                       curl_easy_strerror(curl_init_result));
    return NU_OK;
}

/* What the headers of a response said. Reset at each status line, so that
 * after redirects it describes the last response. */
typedef struct http_headers {
    long status;
    int64_t content_length; /* -1: not sent */
    int64_t linked_size;    /* X-Linked-Size, -1: not sent */
    int64_t range_start;    /* first byte of a Content-Range, -1: not sent */
    char linked_etag[80];   /* X-Linked-ETag without quotes */
    char etag[80];          /* ETag without quotes */
} http_headers;

static void headers_reset(http_headers *h) {
    memset(h, 0, sizeof *h);
    h->content_length = h->linked_size = h->range_start = -1;
}

/* An ETag value without its weak marker and quotes. */
static void take_etag(char *out, size_t cap, const char *v) {
    if (strncmp(v, "W/", 2) == 0) v += 2;
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v++;
        n -= 2;
    }
    if (n >= cap) n = 0; /* too long to be a SHA-256: ignore */
    memcpy(out, v, n);
    out[n] = 0;
}

/* A non-negative header number, or -1. */
static int64_t header_number(const char *v) {
    uint64_t x;
    return parse_u64(v, &x) && x <= (uint64_t)INT64_MAX ? (int64_t)x : -1;
}

/* Records one header line into an http_headers. */
static void note_header(http_headers *h, char *line) {
    if (strncmp(line, "HTTP/", 5) == 0) {
        headers_reset(h);
        const char *sp = strchr(line, ' ');
        if (sp) h->status = strtol(sp + 1, NULL, 10);
        return;
    }
    char *colon = strchr(line, ':');
    if (!colon) return;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (strcasecmp(line, "content-length") == 0)
        h->content_length = header_number(v);
    else if (strcasecmp(line, "x-linked-size") == 0)
        h->linked_size = header_number(v);
    else if (strcasecmp(line, "x-linked-etag") == 0)
        take_etag(h->linked_etag, sizeof h->linked_etag, v);
    else if (strcasecmp(line, "etag") == 0)
        take_etag(h->etag, sizeof h->etag, v);
    else if (strcasecmp(line, "content-range") == 0 && strncmp(v, "bytes ", 6) == 0) {
        v[6 + strspn(v + 6, "0123456789")] = 0; /* "bytes START-END/TOTAL" -> START */
        h->range_start = header_number(v + 6);
    }
}

/* curl's header callback: one header line at a time, not NUL-terminated. */
static size_t on_header(char *data, size_t size, size_t n, void *user) {
    size_t len = size * n;
    char line[1024];
    size_t k = len < sizeof line - 1 ? len : sizeof line - 1;
    memcpy(line, data, k);
    while (k > 0 && (line[k - 1] == '\r' || line[k - 1] == '\n' || line[k - 1] == ' ')) k--;
    line[k] = 0;
    note_header(user, line);
    return len;
}

/* "Authorization: Bearer $HF_TOKEN" when the token is set, else no headers. */
static nu_status auth_headers(struct curl_slist **out, nu_error *err) {
    *out = NULL;
    const char *token = getenv("HF_TOKEN");
    if (!token || !*token) return NU_OK;
    if (strpbrk(token, "\r\n"))
        return nu_fail(err, NU_ERR_INVALID_ARG, "HF_TOKEN must not contain line breaks");
    char line[1024];
    int n = snprintf(line, sizeof line, "Authorization: Bearer %s", token);
    if (n < 0 || (size_t)n >= sizeof line)
        return nu_fail(err, NU_ERR_INVALID_ARG, "HF_TOKEN is too long");
    *out = curl_slist_append(NULL, line);
    return *out ? NU_OK : nu_fail(err, NU_ERR_NOMEM, "out of memory");
}

/* A curl handle with the options every request shares: the URL, our
 * headers (curl sends a custom Authorization only to the original host, so
 * the token never reaches a CDN a redirect points to), HTTP(S) only, fail on
 * HTTP errors, and a low-speed limit instead of a total timeout so that a
 * slow but steady multi-gigabyte download is never cut. */
static CURL *easy_new(const char *url, struct curl_slist *headers, char *errbuf) {
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    errbuf[0] = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "nucleus/" NU_VERSION_STRING);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)MAX_REDIRECTS);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_SECONDS);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, (long)LOW_SPEED_BYTES);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)LOW_SPEED_SECONDS);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
    return c;
}

/* Fills err with curl's account of a failed request and the HTTP status. */
static nu_status network_error(CURL *c, CURLcode rc, const char *errbuf, const char *url,
                               nu_error *err) {
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    const char *why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    const char *hint = "";
    if (status == 401 || status == 403)
        hint = "; a gated or private repository needs HF_TOKEN";
    else if (status == 404)
        hint = "; check the repository, revision and file name";
    if (status > 0)
        return nu_fail(err, NU_ERR_NETWORK, "cannot download %s: HTTP %ld (%s)%s", url, status, why,
                       hint);
    char cache[DL_PATH_MAX];
    if (nu_cache_dir(cache, sizeof cache, NULL) != NU_OK) snprintf(cache, sizeof cache, "(none)");
    return nu_fail(err, NU_ERR_NETWORK,
                   "cannot download %s: %s (no HTTP response). Without network, give a local "
                   ".gguf file instead of the hf: reference, or set NUCLEUS_HF_ENDPOINT to a "
                   "server you can reach; downloads are kept in %s",
                   url, why, cache);
}

/* One HEAD request; the headers of the last response land in h. */
static nu_status head_request(const char *url, struct curl_slist *headers, bool follow,
                              http_headers *h, nu_error *err) {
    char errbuf[CURL_ERROR_SIZE];
    CURL *c = easy_new(url, headers, errbuf);
    if (!c) return nu_fail(err, NU_ERR_NOMEM, "cannot create a curl handle");
    headers_reset(h);
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
    CURLcode rc = curl_easy_perform(c);
    nu_status st = rc == CURLE_OK ? NU_OK : network_error(c, rc, errbuf, url, err);
    curl_easy_cleanup(c);
    return st;
}

/* Learns the size and SHA-256 the server announces for url (see the top of
 * the file): X-Linked-* on the unfollowed answer first, then Content-Length
 * and a 64-hex-digit ETag of the final 200 answer. */
static nu_status probe_remote(const char *url, struct curl_slist *headers, file_facts *out,
                              nu_error *err) {
    http_headers h;
    memset(out, 0, sizeof *out);
    nu_status st = head_request(url, headers, false, &h, err);
    if (st) return st;
    if (h.linked_size >= 0) {
        out->size_known = true;
        out->size = (uint64_t)h.linked_size;
        take_sha256(out->sha256, h.linked_etag);
        return NU_OK;
    }
    if (h.status >= 300 && h.status < 400) st = head_request(url, headers, true, &h, err);
    if (st || h.status != 200) return st;
    out->size_known = h.content_length >= 0;
    out->size = out->size_known ? (uint64_t)h.content_length : 0;
    take_sha256(out->sha256, h.etag);
    return NU_OK;
}

/* ------------------------------------------------------------------------ */
/* Downloading into PATH.part                                               */
/* ------------------------------------------------------------------------ */

/* One GET appending to the .part file. */
typedef struct transfer {
    const cache_entry *entry;
    const file_facts *want;
    int fd;          /* the .part, opened for appending */
    EVP_MD_CTX *sha; /* SHA-256 of the .part's bytes so far */
    uint64_t have;   /* bytes in the .part */
    uint64_t total;  /* for progress: expected size, or 0 when unknown */
    bool started;    /* the first body bytes have been seen */
    http_headers headers;
    int write_errno;       /* a write to disk failed */
    nu_status stop_status; /* why on_body stopped the transfer, with ... */
    const char *stop_why;  /* ... this explanation */
    nu_progress_callback progress;
    void *user;
} transfer;

/* Empties the .part and restarts its hash. */
static bool restart_part(transfer *t) {
    if (ftruncate(t->fd, 0) != 0) return false;
    t->have = 0;
    return EVP_DigestInit_ex(t->sha, EVP_sha256(), NULL) == 1;
}

/* Called at the first body bytes: a 206 must continue exactly where the
 * .part ends; any other 2xx is the whole file, so a server that ignored the
 * Range makes the .part start over. A server that sends the wrong part gets
 * an empty .part, so that the next attempt does not ask it again. */
static bool start_body(transfer *t) {
    t->started = true;
    if (t->headers.status == 206 && t->headers.range_start != (int64_t)t->have) {
        restart_part(t);
        t->stop_status = NU_ERR_NETWORK;
        t->stop_why = "the server answered the Range request with the wrong part of the file";
        return false;
    }
    if (t->headers.status != 206 && t->have > 0 && !restart_part(t)) {
        t->write_errno = errno ? errno : EIO;
        return false;
    }
    if (!t->want->size_known && t->headers.content_length >= 0)
        t->total = t->have + (uint64_t)t->headers.content_length;
    return true;
}

/* Writes all of buf to fd. */
static bool write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t k = write(fd, buf, len);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        buf += k;
        len -= (size_t)k;
    }
    return true;
}

/* curl's write callback: append, hash, report progress. Returning less
 * than len stops the transfer. */
static size_t on_body(char *data, size_t size, size_t n, void *user) {
    transfer *t = user;
    size_t len = size * n;
    if (!t->started && !start_body(t)) return 0;
    if (t->want->size_known && t->have + len > t->want->size) {
        t->stop_status = NU_ERR_CHECKSUM;
        t->stop_why = "the server sent more bytes than it announced";
        return 0;
    }
    if (!write_all(t->fd, data, len)) {
        t->write_errno = errno ? errno : EIO;
        return 0;
    }
    EVP_DigestUpdate(t->sha, data, len);
    t->have += len;
    if (t->progress) t->progress(t->user, t->have, t->total);
    return len;
}

/* GETs the rest of the file (all of it when the .part is empty). */
static nu_status fetch_body(transfer *t, struct curl_slist *headers, nu_error *err) {
    char errbuf[CURL_ERROR_SIZE], range[32];
    const char *url = t->entry->url;
    CURL *c = easy_new(url, headers, errbuf);
    if (!c) return nu_fail(err, NU_ERR_NOMEM, "cannot create a curl handle");
    headers_reset(&t->headers);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t->headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, t);
    if (t->have > 0) {
        snprintf(range, sizeof range, "%" PRIu64 "-", t->have);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    if (t->progress) t->progress(t->user, t->have, t->total);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (status == 416) restart_part(t); /* the .part does not fit the file: start over next time */
    nu_status st = NU_OK;
    if (t->write_errno)
        st = nu_fail(err, NU_ERR_IO, "cannot write %s: %s", t->entry->part,
                     strerror(t->write_errno));
    else if (t->stop_why)
        st = nu_fail(err, t->stop_status, "cannot download %s: %s", url, t->stop_why);
    else if (rc != CURLE_OK)
        st = network_error(c, rc, errbuf, url, err);
    curl_easy_cleanup(c);
    return st;
}

/* Feeds the first `size` bytes of fd to the hash, so that a resumed
 * download's SHA-256 covers the whole file. */
static bool hash_prefix(int fd, uint64_t size, EVP_MD_CTX *sha) {
    char *buf = malloc(HASH_CHUNK);
    uint64_t off = 0;
    while (buf && off < size) {
        size_t want = size - off < HASH_CHUNK ? (size_t)(size - off) : HASH_CHUNK;
        ssize_t k = pread(fd, buf, want, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        EVP_DigestUpdate(sha, buf, (size_t)k);
        off += (uint64_t)k;
    }
    free(buf);
    return off == size;
}

/* Compares the finished .part with what was announced and moves it into
 * place with its sidecar. A mismatch deletes the .part: a resume could
 * never repair it. */
static nu_status install(transfer *t, nu_error *err) {
    const cache_entry *e = t->entry;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;
    file_facts got = {.size_known = true, .size = t->have};
    if (EVP_DigestFinal_ex(t->sha, md, &md_len) != 1 || md_len * 2 != SHA256_HEX_LEN)
        return nu_fail(err, NU_ERR_IO, "SHA-256 computation failed");
    digest_hex(md, md_len, got.sha256);
    if (t->want->size_known && got.size != t->want->size) {
        unlink(e->part);
        return nu_fail(err, NU_ERR_CHECKSUM,
                       "size mismatch for %s: expected %" PRIu64 " bytes, got %" PRIu64
                       " (partial download deleted)",
                       e->url, t->want->size, got.size);
    }
    if (t->want->sha256[0] && strcmp(got.sha256, t->want->sha256) != 0) {
        unlink(e->part);
        return nu_fail(err, NU_ERR_CHECKSUM,
                       "SHA-256 mismatch for %s: expected %s, got %s (partial download deleted)",
                       e->url, t->want->sha256, got.sha256);
    }
    if (fsync(t->fd) != 0)
        return nu_fail(err, NU_ERR_IO, "cannot write %s: %s", e->part, strerror(errno));
    nu_status st = write_sidecar(e, &got, err);
    if (st) return st;
    if (rename(e->part, e->file) != 0)
        return nu_fail(err, NU_ERR_IO, "cannot rename %s: %s", e->part, strerror(errno));
    return NU_OK;
}

/* Opens the .part and decides how much of it to keep: all of it when the
 * download can be resumed (size and SHA-256 announced, not longer than the
 * file), else none. */
static nu_status open_part(transfer *t, nu_error *err) {
    const char *part = t->entry->part;
    struct stat st;
    t->fd = open(part, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (t->fd < 0) return nu_fail(err, NU_ERR_IO, "cannot open %s: %s", part, strerror(errno));
    if (fstat(t->fd, &st) != 0)
        return nu_fail(err, NU_ERR_IO, "cannot stat %s: %s", part, strerror(errno));
    t->have = (uint64_t)st.st_size;
    bool resumable = t->want->size_known && t->want->sha256[0] && t->have <= t->want->size;
    if (!resumable && t->have > 0 && !restart_part(t))
        return nu_fail(err, NU_ERR_IO, "cannot truncate %s: %s", part, strerror(errno));
    if (t->have > 0 && !hash_prefix(t->fd, t->have, t->sha))
        return nu_fail(err, NU_ERR_IO, "cannot read %s: %s", part, strerror(errno));
    return NU_OK;
}

/* Downloads the entry's URL into the cache, resuming its .part. */
static nu_status download_entry(const cache_entry *e, const file_facts *want,
                                struct curl_slist *headers, nu_progress_callback progress,
                                void *user, nu_error *err) {
    transfer t = {.entry = e, .want = want, .fd = -1, .progress = progress, .user = user};
    t.total = want->size_known ? want->size : 0;
    t.sha = EVP_MD_CTX_new();
    if (!t.sha || EVP_DigestInit_ex(t.sha, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(t.sha);
        return nu_fail(err, NU_ERR_NOMEM, "cannot start a SHA-256 computation");
    }
    nu_status st = open_part(&t, err);
    bool complete = want->size_known && t.have == want->size;
    if (!st && !complete) st = fetch_body(&t, headers, err);
    if (!st) st = install(&t, err);
    /* Keep a .part only when it holds bytes a later run can resume from. */
    if (st == NU_ERR_CHECKSUM || (st && t.have == 0)) unlink(e->part);
    if (t.fd >= 0) close(t.fd);
    EVP_MD_CTX_free(t.sha);
    return st;
}

/* Asks the server what to expect, then downloads. */
static nu_status download_with_probe(const cache_entry *e, nu_progress_callback progress,
                                     void *user, nu_error *err) {
    struct curl_slist *headers;
    file_facts want;
    nu_status st = auth_headers(&headers, err);
    if (st) return st;
    st = probe_remote(e->url, headers, &want, err);
    if (!st) st = download_entry(e, &want, headers, progress, user, err);
    curl_slist_free_all(headers);
    return st;
}

/* Fetches an entry that is not in the cache, holding its lock; another
 * process may have finished it while we waited. A failure leaves nothing
 * behind but a .part that a later run can resume: no lock file, no empty
 * directories. */
static nu_status fill_cache(const cache_entry *e, nu_progress_callback progress, void *user,
                            nu_error *err) {
    int lock_fd = -1;
    nu_status st = curl_ready(err);
    if (!st) st = lock_entry(e, &lock_fd, err); /* creates the directories */
    if (!st && !cache_hit(e)) st = download_with_probe(e, progress, user, err);
    if (lock_fd >= 0) unlock_entry(e, lock_fd);
    if (st) prune_empty_dirs(e);
    return st;
}

nu_status nu_resolve_model(const char *ref, bool allow_download, nu_progress_callback progress,
                           void *user, char *path, size_t cap, nu_error *err) {
    if (!ref || !*ref) return nu_fail(err, NU_ERR_INVALID_ARG, "no model given");
    if (!nu_is_model_ref(ref)) return copy_out(path, cap, ref, "the model path", err);
    hf_ref r;
    cache_entry *e = malloc(sizeof *e);
    if (!e) return nu_fail(err, NU_ERR_NOMEM, "out of memory");
    nu_status st = parse_hf_ref(ref, &r, err);
    if (!st) st = cache_entry_for(&r, e, err);
    if (!st && (!path || strlen(e->file) >= cap)) /* fail before downloading, not after */
        st = copy_out(path, cap, e->file, "the model path", err);
    if (!st && !cache_hit(e)) {
        if (!allow_download)
            st = nu_fail(err, NU_ERR_IO, "%.200s is not in the cache (%s) and downloading is off",
                         ref, e->file);
        else
            st = fill_cache(e, progress, user, err);
    }
    if (!st) st = copy_out(path, cap, e->file, "the model path", err);
    free(e);
    return st;
}

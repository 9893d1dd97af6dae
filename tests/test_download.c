/*
 * test_download.c - models by name: reference parsing, the cache directory,
 * and downloads from a tiny HTTP/1.1 server on 127.0.0.1 that imitates the
 * Hugging Face resolve endpoint (HEAD -> 302 with X-Linked-Size and
 * X-Linked-ETag, GET -> 302 to a "CDN" path that honours Range), with modes
 * that cut the connection, ignore Range, lie about the SHA-256 or answer 404.
 */
#include "test_support.h"

#include "nucleus.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define MODEL_SHA256 "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"
#define MODEL_SIZE 1185376
#define WRONG_SHA256 "1111111111111111111111111111111111111111111111111111111111111111"
#define REF "hf:ggml-org/models/tinyllamas/stories260K.gguf"
#define RESOLVE_PATH "/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf"
#define CDN_PATH "/cdn/blob/stories260K"
#define CACHED_REL "hf/ggml-org/models/main/tinyllamas/stories260K.gguf"

/* ------------------------------------------------------------------------ */
/* The test server                                                          */
/* ------------------------------------------------------------------------ */

enum {
    SRV_CUT_HALF = 1 << 0,     /* file bodies stop half-way and the connection closes */
    SRV_IGNORE_RANGE = 1 << 1, /* file bodies are always 200 and whole */
    SRV_WRONG_SHA = 1 << 2,    /* the announced SHA-256 is wrong */
    SRV_NOT_FOUND = 1 << 3,    /* every request gets 404 */
    SRV_NO_LINKED = 1 << 4,    /* HEAD redirects without X-Linked-* headers */
    SRV_PLAIN = 1 << 5,        /* the resolve URL serves the file itself, ETag = SHA-256 */
    SRV_NO_SHA = 1 << 6,       /* no SHA-256 is announced anywhere */
    SRV_SHORT_SIZE = 1 << 7,   /* X-Linked-Size announces half the real size */
    SRV_BAD_RANGE = 1 << 8,    /* a Range request gets a 206 that starts at byte 0 */
    SRV_LONG_SIZE = 1 << 9,    /* X-Linked-Size announces twice the real size */
};

enum { SOCKET_TIMEOUT_SECONDS = 5, POLL_MS = 50 };

/* What the server has seen. */
typedef struct server_counts {
    int n_requests, n_head, n_get, n_range;
    char last_auth[256]; /* the last Authorization header */
} server_counts;

/* A one-connection-at-a-time HTTP/1.1 server in a thread, serving one file.
 * Every connection carries one request ("Connection: close"). */
typedef struct test_server {
    int listen_fd;
    int port;
    pthread_t thread;
    pthread_mutex_t lock; /* guards everything below */
    bool stop;
    unsigned mode;
    server_counts counts;
} test_server;

static char *g_model; /* the served file's bytes */
static size_t g_model_len;

/* Sends all of buf, giving up quietly when the client has gone. */
static bool send_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t k = send(fd, buf, len, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        buf += k;
        len -= (size_t)k;
    }
    return true;
}

/* Sends a status line and headers, ending the header block. */
static bool send_head(int fd, const char *status, const char *headers, size_t content_length) {
    char buf[2048];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %s\r\n%sContent-Length: %zu\r\nConnection: close\r\n\r\n", status,
                     headers, content_length);
    return send_all(fd, buf, (size_t)n);
}

/* Reads the request head (up to the blank line) into buf; false on timeout,
 * EOF or a request too long for the buffer. */
static bool read_request(int fd, char *buf, size_t cap) {
    size_t used = 0;
    while (used + 1 < cap) {
        ssize_t k = recv(fd, buf + used, cap - 1 - used, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        used += (size_t)k;
        buf[used] = 0;
        if (strstr(buf, "\r\n\r\n")) return true;
    }
    return false;
}

/* The value of header `name` in a request head, copied into out ("" if absent). */
static void request_header(const char *req, const char *name, char *out, size_t cap) {
    out[0] = 0;
    const char *p = strcasestr(req, name);
    if (!p) return;
    p += strlen(name);
    while (*p == ' ') p++;
    size_t n = strcspn(p, "\r\n");
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = 0;
}

/* Serves the file, honouring "Range: bytes=START-" unless told not to, and
 * stopping half-way when told to cut. */
static void serve_file(int fd, const char *range, unsigned mode, bool head) {
    size_t start = 0;
    char headers[256] = "";
    if (range[0] && !(mode & SRV_IGNORE_RANGE)) {
        start = mode & SRV_BAD_RANGE ? 0 : (size_t)strtoull(range + strlen("bytes="), NULL, 10);
        if (start >= g_model_len) {
            send_head(fd, "416 Range Not Satisfiable", "", 0);
            return;
        }
        snprintf(headers, sizeof headers, "Content-Range: bytes %zu-%zu/%zu\r\n", start,
                 g_model_len - 1, g_model_len);
    }
    size_t len = g_model_len - start;
    const char *status = headers[0] ? "206 Partial Content" : "200 OK";
    if (mode & SRV_PLAIN && !(mode & SRV_NO_SHA)) strcat(headers, "ETag: \"" MODEL_SHA256 "\"\r\n");
    if (!send_head(fd, status, headers, len) || head) return;
    send_all(fd, g_model + start, mode & SRV_CUT_HALF ? len / 2 : len);
}

/* Answers a HEAD on the resolve URL the way Hugging Face does for LFS files. */
static void serve_resolve_head(int fd, unsigned mode) {
    char headers[512];
    if (mode & SRV_NO_LINKED) {
        send_head(fd, "302 Found", "Location: " CDN_PATH "\r\n", 0);
        return;
    }
    int n = snprintf(headers, sizeof headers, "Location: %s\r\nX-Linked-Size: %zu\r\n", CDN_PATH,
                     mode & SRV_SHORT_SIZE  ? g_model_len / 2
                     : mode & SRV_LONG_SIZE ? g_model_len * 2
                                            : g_model_len);
    if (!(mode & SRV_NO_SHA))
        snprintf(headers + n, sizeof headers - (size_t)n, "X-Linked-ETag: \"%s\"\r\n",
                 mode & SRV_WRONG_SHA ? WRONG_SHA256 : MODEL_SHA256);
    send_head(fd, "302 Found", headers, 0);
}

/* Routes one request. */
static void respond(int fd, const char *method, const char *path, const char *range,
                    unsigned mode) {
    bool head = strcmp(method, "HEAD") == 0;
    bool resolve = strcmp(path, RESOLVE_PATH) == 0, cdn = strcmp(path, CDN_PATH) == 0;
    if (mode & SRV_NOT_FOUND || !(resolve || cdn)) {
        static const char body[] = "Entry not found";
        if (send_head(fd, "404 Not Found", "", sizeof body - 1) && !head)
            send_all(fd, body, sizeof body - 1);
    } else if (cdn || mode & SRV_PLAIN)
        serve_file(fd, range, mode, head);
    else if (head)
        serve_resolve_head(fd, mode);
    else
        send_head(fd, "302 Found", "Location: " CDN_PATH "\r\n", 0);
}

/* Reads one request, counts it, answers it and closes the connection. */
static void serve_connection(test_server *s, int fd) {
    struct timeval tv = {.tv_sec = SOCKET_TIMEOUT_SECONDS};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char req[8192], method[16] = "", path[1024] = "", range[64], auth[256];
    if (read_request(fd, req, sizeof req) && sscanf(req, "%15s %1023s", method, path) == 2) {
        request_header(req, "\r\nRange:", range, sizeof range);
        request_header(req, "\r\nAuthorization:", auth, sizeof auth);
        pthread_mutex_lock(&s->lock);
        unsigned mode = s->mode;
        server_counts *c = &s->counts;
        c->n_requests++;
        c->n_head += strcmp(method, "HEAD") == 0;
        c->n_get += strcmp(method, "GET") == 0;
        c->n_range += range[0] != 0;
        if (auth[0]) snprintf(c->last_auth, sizeof c->last_auth, "%s", auth);
        pthread_mutex_unlock(&s->lock);
        respond(fd, method, path, range, mode);
    }
    shutdown(fd, SHUT_WR);
    close(fd);
}

/* The server thread: accept until told to stop (checked every POLL_MS). */
static void *server_main(void *arg) {
    test_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->lock);
        if (stop) break;
        struct pollfd p = {.fd = s->listen_fd, .events = POLLIN};
        if (poll(&p, 1, POLL_MS) <= 0) continue;
        int fd = accept(s->listen_fd, NULL, NULL);
        if (fd >= 0) serve_connection(s, fd);
    }
    return NULL;
}

/* Starts a server on 127.0.0.1 on an ephemeral port and points
 * NUCLEUS_HF_ENDPOINT at it. */
static test_server *server_start(unsigned mode) {
    test_server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    pthread_mutex_init(&s->lock, NULL);
    s->mode = mode;
    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s->listen_fd >= 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s->listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
    assert_int_equal(listen(s->listen_fd, 16), 0);
    socklen_t len = sizeof addr;
    assert_int_equal(getsockname(s->listen_fd, (struct sockaddr *)&addr, &len), 0);
    s->port = ntohs(addr.sin_port);
    assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", s->port);
    setenv("NUCLEUS_HF_ENDPOINT", endpoint, 1);
    return s;
}

static void server_set_mode(test_server *s, unsigned mode) {
    pthread_mutex_lock(&s->lock);
    s->mode = mode;
    pthread_mutex_unlock(&s->lock);
}

/* A snapshot of the request counters. */
static server_counts server_seen(test_server *s) {
    pthread_mutex_lock(&s->lock);
    server_counts copy = s->counts;
    pthread_mutex_unlock(&s->lock);
    return copy;
}

/* Stops the thread and closes the socket; the endpoint keeps pointing at the
 * closed port, so any later request would fail. */
static void server_stop(test_server *s) {
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* ------------------------------------------------------------------------ */
/* Fixtures                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct progress_log {
    int calls;
    uint64_t done, total;
} progress_log;

static void record_progress(void *user, uint64_t done, uint64_t total) {
    progress_log *p = user;
    p->calls++;
    p->done = done;
    p->total = total;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

/* Points NUCLEUS_CACHE at an empty scratch directory; returns its path. */
static const char *fresh_cache(const char *name) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s", nu_test_tmp(name));
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    assert_int_equal(mkdir(dir, 0755), 0);
    setenv("NUCLEUS_CACHE", dir, 1);
    return dir;
}

/* "<cache>/<rel><suffix>" in a static buffer. */
static const char *cache_file(const char *cache, const char *suffix) {
    static char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s%s", cache, CACHED_REL, suffix);
    assert_true(n > 0 && (size_t)n < sizeof path);
    return path;
}

/* Asserts that path holds exactly the served model. */
static void assert_is_model(const char *path) {
    size_t len = 0;
    char *data = nu_test_read_file(path, &len);
    assert_non_null(data);
    assert_int_equal(len, g_model_len);
    assert_memory_equal(data, g_model, g_model_len);
    free(data);
}

/* Asserts that the file's text contains needle. */
static void assert_file_contains(const char *path, const char *needle) {
    char *text = nu_test_read_file(path, NULL);
    assert_non_null(text);
    assert_non_null(strstr(text, needle));
    free(text);
}

static int g_entries; /* counted by count_entry */

static int count_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    if (ftw->level > 0) g_entries++;
    return 0;
}

/* Files and directories below dir (dir itself not counted). */
static int entries_below(const char *dir) {
    g_entries = 0;
    assert_int_equal(nftw(dir, count_entry, 16, FTW_PHYS), 0);
    return g_entries;
}

/* A loopback port nothing listens on: bound, then released. */
static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static nu_status resolve(char *path, size_t cap, progress_log *log, nu_error *err) {
    return nu_resolve_model(REF, true, log ? record_progress : NULL, log, path, cap, err);
}

/* Loads the model file and keeps proxies away from loopback. */
static int setup_all(void **state) {
    g_model = nu_test_read_file(nu_test_shared("models/stories260K.gguf"), &g_model_len);
    if (!g_model || g_model_len != MODEL_SIZE) return -1;
    unsetenv("HF_TOKEN");
    unsetenv("http_proxy");
    unsetenv("HTTP_PROXY");
    unsetenv("all_proxy");
    unsetenv("ALL_PROXY");
    setenv("no_proxy", "127.0.0.1", 1);
    setenv("NO_PROXY", "127.0.0.1", 1);
    return 0;
}

static int teardown_all(void **state) {
    free(g_model);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* References and the cache directory                                       */
/* ------------------------------------------------------------------------ */

static void test_is_model_ref(void **state) {
    assert_true(nu_is_model_ref(REF));
    assert_true(nu_is_model_ref("hf:x"));
    assert_false(nu_is_model_ref("model.gguf"));
    assert_false(nu_is_model_ref("/models/hf:x.gguf"));
    assert_false(nu_is_model_ref("./hf:x"));
    assert_false(nu_is_model_ref("HF:a/b/c"));
    assert_false(nu_is_model_ref(""));
    assert_false(nu_is_model_ref(NULL));
}

static void test_cache_dir(void **state) {
    char buf[4096], small[4], home[4096];
    nu_error err;
    snprintf(home, sizeof home, "%s", getenv("HOME") ? getenv("HOME") : "/");
    setenv("NUCLEUS_CACHE", "/tmp/nu-cache/", 1);
    assert_int_equal(nu_cache_dir(buf, sizeof buf, &err), NU_OK);
    assert_string_equal(buf, "/tmp/nu-cache");
    assert_int_equal(nu_cache_dir(small, sizeof small, &err), NU_ERR_BUFFER_SMALL);
    unsetenv("NUCLEUS_CACHE");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    assert_int_equal(nu_cache_dir(buf, sizeof buf, &err), NU_OK);
    assert_string_equal(buf, "/xdg/nucleus");
    setenv("XDG_CACHE_HOME", "relative", 1); /* ignored, as the XDG spec says */
    setenv("HOME", "/home/u", 1);
    assert_int_equal(nu_cache_dir(buf, sizeof buf, &err), NU_OK);
    assert_string_equal(buf, "/home/u/.cache/nucleus");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    assert_int_equal(nu_cache_dir(buf, sizeof buf, &err), NU_ERR_INVALID_ARG);
    assert_non_null(strstr(err.message, "NUCLEUS_CACHE"));
    setenv("HOME", home, 1);
}

/* Valid references map to the documented cache path; with downloading off
 * and an empty cache the error names that path. */
static void test_valid_refs(void **state) {
    static const char *cases[][2] = {
        {REF, "hf/ggml-org/models/main/tinyllamas/stories260K.gguf"},
        {"hf:ORG/REPO@v1/FILE.gguf", "hf/ORG/REPO/v1/FILE.gguf"},
        {"hf:TheBloke/Llama-2-7B-GGUF/llama-2-7b.Q4_0.gguf",
         "hf/TheBloke/Llama-2-7B-GGUF/main/llama-2-7b.Q4_0.gguf"},
        {"hf:a/b@0123abcd/c/d/e+f_g.gguf", "hf/a/b/0123abcd/c/d/e+f_g.gguf"},
        {"hf:a/b/.hidden", "hf/a/b/main/.hidden"},
    };
    const char *cache = fresh_cache("download_refs");
    setenv("NUCLEUS_HF_ENDPOINT", "http://127.0.0.1:9", 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[4096], want[4096];
        nu_error err;
        int n = snprintf(want, sizeof want, "%s/%s", cache, cases[i][1]);
        assert_true(n > 0 && (size_t)n < sizeof want);
        nu_status st = nu_resolve_model(cases[i][0], false, NULL, NULL, path, sizeof path, &err);
        assert_int_equal(st, NU_ERR_IO);
        assert_non_null(strstr(err.message, "not in the cache"));
        assert_non_null(strstr(err.message, want));
    }
}

static void test_invalid_refs(void **state) {
    static const char *cases[] = {
        "hf:",
        "hf:org",
        "hf:org/repo",
        "hf:org/repo/",
        "hf:/org/repo/f.gguf",
        "hf:org//f.gguf",
        "hf:org/repo//f.gguf",
        "hf:org/repo/dir/",
        "hf:org/repo/../f.gguf",
        "hf:org/repo/a/../../../etc/passwd",
        "hf:org/repo/./f.gguf",
        "hf:../repo/f.gguf",
        "hf:org/..@v1/f.gguf",
        "hf:org/repo@/f.gguf",
        "hf:org/repo@../f.gguf",
        "hf:org/repo@v1@v2/f.gguf",
        "hf:org/re po/f.gguf",
        "hf:org/repo/f g.gguf",
        "hf:org/repo/f%2e.gguf",
        "hf:org/repo/f\\x.gguf",
        "hf:org/repo/f.gguf?download=1",
        "hf:org/repo/f.gguf#x",
        "hf:org/repo/f\n.gguf",
        "hf:org/repo/caf\xc3\xa9.gguf",
        "hf:org/repo/f.gguf.part",
        "hf:org/repo/f.gguf.meta",
        "hf:org/repo/f.gguf.lock",
    };
    fresh_cache("download_badrefs");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[4096];
        nu_error err = {0};
        nu_status st = nu_resolve_model(cases[i], true, NULL, NULL, path, sizeof path, &err);
        if (st != NU_ERR_INVALID_ARG) fail_msg("accepted \"%s\" (%d)", cases[i], st);
        assert_non_null(strstr(err.message, "invalid model reference"));
    }
}

/* Paths pass through untouched; buffers that are too small are reported. */
static void test_paths_and_buffers(void **state) {
    char path[4096], small[8];
    nu_error err;
    assert_int_equal(nu_resolve_model("models/x.gguf", true, NULL, NULL, path, sizeof path, &err),
                     NU_OK);
    assert_string_equal(path, "models/x.gguf");
    assert_int_equal(nu_resolve_model("models/x.gguf", true, NULL, NULL, small, sizeof small, &err),
                     NU_ERR_BUFFER_SMALL);
    assert_int_equal(nu_resolve_model("", true, NULL, NULL, path, sizeof path, &err),
                     NU_ERR_INVALID_ARG);
    fresh_cache("download_small");
    assert_int_equal(nu_resolve_model(REF, true, NULL, NULL, small, sizeof small, &err),
                     NU_ERR_BUFFER_SMALL);
    setenv("NUCLEUS_HF_ENDPOINT", "ftp://127.0.0.1", 1);
    assert_int_equal(nu_resolve_model(REF, true, NULL, NULL, path, sizeof path, &err),
                     NU_ERR_INVALID_ARG);
}

/* ------------------------------------------------------------------------ */
/* Downloads                                                                */
/* ------------------------------------------------------------------------ */

/* (e) A download lands in the cache with its sidecar; the second resolve
 * uses it without contacting the server, even with the server gone. */
static void test_download_then_cache(void **state) {
    const char *cache = fresh_cache("download_basic");
    test_server *s = server_start(0);
    char path[4096];
    nu_error err;
    progress_log log = {0};
    assert_int_equal(resolve(path, sizeof path, &log, &err), NU_OK);
    assert_string_equal(path, cache_file(cache, ""));
    assert_is_model(path);
    assert_file_contains(cache_file(cache, ".meta"), "sha256 " MODEL_SHA256);
    assert_file_contains(cache_file(cache, ".meta"), "size 1185376");
    assert_false(nu_test_exists(cache_file(cache, ".part")));
    assert_false(nu_test_exists(cache_file(cache, ".lock")));
    assert_true(log.calls > 1);
    assert_int_equal(log.done, MODEL_SIZE);
    assert_int_equal(log.total, MODEL_SIZE);
    server_counts c = server_seen(s);
    assert_int_equal(c.n_head, 1);
    assert_int_equal(c.n_get, 2); /* resolve URL, then the redirect */
    assert_int_equal(c.n_range, 0);

    int before = c.n_requests;
    log.calls = 0;
    assert_int_equal(resolve(path, sizeof path, &log, &err), NU_OK);
    assert_int_equal(server_seen(s).n_requests, before);
    assert_int_equal(log.calls, 0);
    server_stop(s);
    assert_int_equal(nu_resolve_model(REF, false, NULL, NULL, path, sizeof path, &err), NU_OK);
    assert_string_equal(path, cache_file(cache, ""));
}

/* (a) A connection cut half-way leaves a .part; the next resolve resumes it
 * with a Range request and finishes with the right bytes. */
static void test_resume_after_cut(void **state) {
    const char *cache = fresh_cache("download_resume");
    test_server *s = server_start(SRV_CUT_HALF);
    char path[4096];
    nu_error err;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_ERR_NETWORK);
    assert_false(nu_test_exists(cache_file(cache, "")));
    struct stat st;
    assert_int_equal(stat(cache_file(cache, ".part"), &st), 0);
    assert_true(st.st_size > 0 && st.st_size < MODEL_SIZE);

    server_set_mode(s, 0);
    progress_log log = {0};
    assert_int_equal(resolve(path, sizeof path, &log, &err), NU_OK);
    assert_is_model(path);
    assert_true(server_seen(s).n_range >= 1);
    assert_int_equal(log.done, MODEL_SIZE);
    assert_false(nu_test_exists(cache_file(cache, ".part")));
    server_stop(s);
}

/* Writes a .part for the entry, as an interrupted run would leave it,
 * creating the directories above it. */
static void write_part(const char *cache, const char *data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s", cache_file(cache, ".part"));
    for (char *p = path + strlen(cache) + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
        *p = '/';
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* (b) A server that ignores Range sends the whole file with 200: the .part
 * (here junk, so appending would be caught) is restarted from zero. */
static void test_server_ignores_range(void **state) {
    const char *cache = fresh_cache("download_norange");
    char junk[1000];
    memset(junk, 'x', sizeof junk);
    write_part(cache, junk, sizeof junk);
    test_server *s = server_start(SRV_IGNORE_RANGE);
    char path[4096];
    nu_error err;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_OK);
    assert_is_model(path);
    assert_true(server_seen(s).n_range >= 1);
    server_stop(s);
}

/* A 206 that does not continue the .part is refused, and the .part dropped
 * so that the next attempt starts from zero. */
static void test_wrong_range_answer(void **state) {
    const char *cache = fresh_cache("download_badrange");
    write_part(cache, g_model, 1000);
    test_server *s = server_start(SRV_BAD_RANGE);
    char path[4096];
    nu_error err;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_ERR_NETWORK);
    assert_non_null(strstr(err.message, "wrong part"));
    assert_false(nu_test_exists(cache_file(cache, ".part")));
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_OK);
    assert_is_model(path);
    server_stop(s);
}

/* A .part longer than the server's file (which announced more than it has)
 * gets 416: a network error, and the .part is dropped. */
static void test_range_not_satisfiable(void **state) {
    const char *cache = fresh_cache("download_416");
    write_part(cache, g_model, g_model_len);
    test_server *s = server_start(SRV_LONG_SIZE);
    char path[4096];
    nu_error err;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_ERR_NETWORK);
    assert_non_null(strstr(err.message, "416"));
    assert_false(nu_test_exists(cache_file(cache, ".part")));
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_ERR_CHECKSUM);
    assert_non_null(strstr(err.message, "size mismatch"));
    assert_false(nu_test_exists(cache_file(cache, "")));
    server_stop(s);
}

/* A .part that is already complete is checked and installed without a GET. */
static void test_complete_part(void **state) {
    const char *cache = fresh_cache("download_complete");
    write_part(cache, g_model, g_model_len);
    test_server *s = server_start(0);
    char path[4096];
    nu_error err;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_OK);
    assert_is_model(path);
    assert_int_equal(server_seen(s).n_get, 0);
    server_stop(s);
}

/* (c) A SHA-256 mismatch is NU_ERR_CHECKSUM naming both values, and leaves
 * neither the file nor its .part behind. */
static void test_wrong_sha(void **state) {
    const char *cache = fresh_cache("download_badsha");
    test_server *s = server_start(SRV_WRONG_SHA);
    char path[4096];
    nu_error err;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_ERR_CHECKSUM);
    assert_non_null(strstr(err.message, WRONG_SHA256));
    assert_non_null(strstr(err.message, MODEL_SHA256));
    assert_false(nu_test_exists(cache_file(cache, "")));
    assert_false(nu_test_exists(cache_file(cache, ".part")));
    assert_false(nu_test_exists(cache_file(cache, ".meta")));
    server_stop(s);
}

/* (d) 404 is NU_ERR_NETWORK with the status in the message. */
static void test_not_found(void **state) {
    const char *cache = fresh_cache("download_404");
    test_server *s = server_start(SRV_NOT_FOUND);
    char path[4096];
    nu_error err;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_ERR_NETWORK);
    assert_non_null(strstr(err.message, "404"));
    assert_int_equal(entries_below(cache), 0); /* no file, .part, .lock or directory */
    server_stop(s);
}

/* A server that cannot be reached (no network): NU_ERR_NETWORK saying what
 * to do instead, and an empty cache (no .lock, .part or directories). */
static void test_unreachable_leaves_nothing(void **state) {
    const char *cache = fresh_cache("download_unreachable");
    char endpoint[64], path[4096];
    snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%d", closed_port());
    setenv("NUCLEUS_HF_ENDPOINT", endpoint, 1);
    nu_error err;
    nu_status st = resolve(path, sizeof path, NULL, &err);
    unsetenv("NUCLEUS_HF_ENDPOINT");
    assert_int_equal(st, NU_ERR_NETWORK);
    assert_non_null(strstr(err.message, endpoint));
    assert_non_null(strstr(err.message, "no HTTP response"));
    assert_non_null(strstr(err.message, "local .gguf file"));
    assert_non_null(strstr(err.message, "NUCLEUS_HF_ENDPOINT"));
    assert_non_null(strstr(err.message, cache));
    assert_int_equal(entries_below(cache), 0);
}

/* A body longer than the announced size is stopped early: NU_ERR_CHECKSUM,
 * nothing left behind. */
static void test_body_longer_than_announced(void **state) {
    const char *cache = fresh_cache("download_long");
    test_server *s = server_start(SRV_SHORT_SIZE);
    char path[4096];
    nu_error err;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_ERR_CHECKSUM);
    assert_non_null(strstr(err.message, "more bytes"));
    assert_false(nu_test_exists(cache_file(cache, "")));
    assert_false(nu_test_exists(cache_file(cache, ".part")));
    server_stop(s);
}

typedef struct resolve_job {
    pthread_t thread;
    nu_status status;
    char path[4096];
} resolve_job;

static void *resolve_thread(void *arg) {
    resolve_job *job = arg;
    nu_error err;
    job->status = resolve(job->path, sizeof job->path, NULL, &err);
    return NULL;
}

/* Threads resolving the same reference at once share one download (the
 * .lock serialises them; the later ones find the file in the cache). */
static void test_concurrent_resolves(void **state) {
    const char *cache = fresh_cache("download_concurrent");
    test_server *s = server_start(0);
    resolve_job jobs[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&jobs[i].thread, NULL, resolve_thread, &jobs[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(jobs[i].thread, NULL);
        assert_int_equal(jobs[i].status, NU_OK);
        assert_string_equal(jobs[i].path, cache_file(cache, ""));
    }
    assert_is_model(cache_file(cache, ""));
    assert_false(nu_test_exists(cache_file(cache, ".lock")));
    assert_int_equal(server_seen(s).n_head, 1);
    server_stop(s);
}

/* Threads failing on the same reference at once (each waits for the lock,
 * then fails in turn) leave nothing behind either, and none trips over the
 * lock file or the directories another one removed. */
static void test_concurrent_failures(void **state) {
    const char *cache = fresh_cache("download_concurrent_fail");
    test_server *s = server_start(SRV_NOT_FOUND);
    resolve_job jobs[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&jobs[i].thread, NULL, resolve_thread, &jobs[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(jobs[i].thread, NULL);
        assert_int_equal(jobs[i].status, NU_ERR_NETWORK);
    }
    assert_int_equal(entries_below(cache), 0);
    server_stop(s);
}

/* Without X-Linked-* headers: Content-Length and a SHA-256 ETag of the
 * final answer; with no SHA-256 at all, the computed one is recorded. */
static void test_fallback_headers(void **state) {
    static const unsigned modes[] = {SRV_PLAIN, SRV_PLAIN | SRV_NO_SHA, SRV_NO_LINKED, SRV_NO_SHA};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        const char *cache = fresh_cache("download_fallback");
        test_server *s = server_start(modes[i]);
        char path[4096];
        nu_error err;
        progress_log log = {0};
        assert_int_equal(resolve(path, sizeof path, &log, &err), NU_OK);
        assert_is_model(path);
        assert_file_contains(cache_file(cache, ".meta"), "sha256 " MODEL_SHA256);
        assert_int_equal(log.total, MODEL_SIZE);
        server_stop(s);
    }
}

/* Without an announced SHA-256 a cut download is restarted, not resumed:
 * nothing could check the joined file. */
static void test_cut_without_sha_restarts(void **state) {
    const char *cache = fresh_cache("download_nosha_cut");
    test_server *s = server_start(SRV_NO_SHA | SRV_CUT_HALF);
    char path[4096];
    nu_error err;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_ERR_NETWORK);
    server_set_mode(s, SRV_NO_SHA);
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_OK);
    assert_is_model(path);
    assert_int_equal(server_seen(s).n_range, 0);
    assert_false(nu_test_exists(cache_file(cache, ".part")));
    server_stop(s);
}

/* A file whose sidecar no longer matches it is downloaded again. */
static void test_inconsistent_cache(void **state) {
    const char *cache = fresh_cache("download_stale");
    test_server *s = server_start(0);
    char path[4096];
    nu_error err;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_OK);
    assert_int_equal(truncate(path, 100), 0);
    assert_int_equal(nu_resolve_model(REF, false, NULL, NULL, path, sizeof path, &err), NU_ERR_IO);
    assert_non_null(strstr(err.message, "not in the cache"));
    int before = server_seen(s).n_requests;
    assert_int_equal(resolve(path, sizeof path, NULL, &err), NU_OK);
    assert_true(server_seen(s).n_requests > before);
    assert_is_model(path);
    assert_int_equal(remove(cache_file(cache, ".meta")), 0);
    assert_int_equal(nu_resolve_model(REF, false, NULL, NULL, path, sizeof path, &err), NU_ERR_IO);
    server_stop(s);
}

/* $HF_TOKEN goes out as a bearer token. */
static void test_token(void **state) {
    fresh_cache("download_token");
    test_server *s = server_start(0);
    setenv("HF_TOKEN", "hf_secret123", 1);
    char path[4096];
    nu_error err;
    nu_status st = resolve(path, sizeof path, NULL, &err);
    unsetenv("HF_TOKEN");
    assert_int_equal(st, NU_OK);
    assert_string_equal(server_seen(s).last_auth, "Bearer hf_secret123");
    server_stop(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_is_model_ref),
        cmocka_unit_test(test_cache_dir),
        cmocka_unit_test(test_valid_refs),
        cmocka_unit_test(test_invalid_refs),
        cmocka_unit_test(test_paths_and_buffers),
        cmocka_unit_test(test_download_then_cache),
        cmocka_unit_test(test_resume_after_cut),
        cmocka_unit_test(test_server_ignores_range),
        cmocka_unit_test(test_wrong_range_answer),
        cmocka_unit_test(test_range_not_satisfiable),
        cmocka_unit_test(test_complete_part),
        cmocka_unit_test(test_wrong_sha),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_unreachable_leaves_nothing),
        cmocka_unit_test(test_body_longer_than_announced),
        cmocka_unit_test(test_concurrent_resolves),
        cmocka_unit_test(test_concurrent_failures),
        cmocka_unit_test(test_fallback_headers),
        cmocka_unit_test(test_cut_without_sha_restarts),
        cmocka_unit_test(test_inconsistent_cache),
        cmocka_unit_test(test_token),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}

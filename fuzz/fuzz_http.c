/* fuzz_http.c - libFuzzer target for the server's HTTP side, as raw bytes.
 *
 * The whole server (server/: libmicrohttpd, routing, framing checks,
 * deadlines, the request parsers, the engine generating with the demo
 * model) runs in this process on a loopback port. Each input is sent as it
 * is over a new connection, our side is then closed for writing, and the
 * answer is read until the server closes (a bounded wait): whatever the
 * bytes, the server must answer HTTP or close, and go on serving. ASan and
 * UBSan watch every thread of it. Small limits (a context of 128, at most
 * 8 new tokens, a 1 s timeout) keep each input fast. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nucleus.h"
#include "server.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static srv_config cfg;
static srv_model_spec spec = {.path = NU_FUZZ_MODEL};
static int port;

static void check(bool ok) {
    if (!ok) abort();
}

static void *serve(void *arg) {
    (void)arg;
    srv_run(&cfg);
    return NULL;
}

/* A free loopback port (bound, read and released: a small race, fine here). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    check(fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
          !getsockname(fd, (struct sockaddr *)&a, &len));
    close(fd);
    return ntohs(a.sin_port);
}

/* A connection to the server, or -1 with errno set. libFuzzer's timers
 * send this process signals, so a call may end with EINTR: it is tried
 * again. When the kernel has no free local port (EADDRNOTAVAIL: thousands
 * of short connections a second, a shortage on the client's side, not a
 * server fault) it waits and tries again, for up to 10 s. */
static int connect_server(void) {
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int attempt = 0;; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return -1;
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        int e = errno;
        close(fd);
        errno = e;
        if (e == EINTR && attempt < 100) continue;
        if (e != EADDRNOTAVAIL || attempt >= 100) return -1;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    cfg = srv_default_config();
    cfg.models = &spec;
    cfg.n_models = 1;
    cfg.port = port = free_port();
    cfg.parallel = 2;
    cfg.ctx_per_slot = 128;
    cfg.max_tokens_limit = 8;
    cfg.n_threads = 1;
    cfg.max_body = 1 << 16;
    cfg.timeout_s = 1;
    cfg.quiet = true;
    pthread_t t;
    check(pthread_create(&t, NULL, serve, NULL) == 0);
    for (int i = 0; i < 600; i++) { /* up to a minute for the server to listen */
        int fd = connect_server();
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "fuzz_http: the server did not start\n");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = connect_server();
    if (fd < 0) { /* the server must still serve */
        fprintf(stderr, "fuzz_http: cannot connect to the server: %s\n", strerror(errno));
        abort();
    }
    for (size_t off = 0; off < size;) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; /* it may close early (a refused request) */
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    char buf[4096], head[8] = "";
    size_t got = 0;
    for (;;) { /* the answer, until the server closes (at most ~5 s) */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ready = poll(&p, 1, 5000);
        if (ready < 0 && errno == EINTR) continue; /* (a signal restarts the wait) */
        if (ready <= 0) break;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (ssize_t i = 0; i < n && got < sizeof head - 1; i++) head[got++] = buf[i];
    }
    close(fd);
    if (got >= 5 && memcmp(head, "HTTP/", 5)) { /* HTTP, or nothing */
        fprintf(stderr, "fuzz_http: the answer does not start with HTTP/:");
        for (size_t i = 0; i < got; i++) fprintf(stderr, " %02x", (unsigned char)head[i]);
        fprintf(stderr, "\n");
        abort();
    }
    return 0;
}

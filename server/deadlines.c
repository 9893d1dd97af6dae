/* deadlines.c - the watchdog of requests that arrive too slowly (deadlines.h).
 *
 * Each connection has a watch in a list under one mutex. libmicrohttpd
 * reports a connection closed before it closes its socket, and the watch is
 * unlinked under the mutex the watchdog holds while it shuts a socket down,
 * so the watchdog never touches a descriptor that was closed (and perhaps
 * reused by another connection). */
#include "deadlines.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "nucleus.h"

typedef struct watch {
    srv_deadlines *owner;
    int fd;
    bool receiving;  /* waiting for (the rest of) a request */
    bool kept_alive; /* it has answered a request before */
    double deadline; /* nu_time_ms() by which it must have arrived */
    struct watch *prev, *next;
} watch;

struct srv_deadlines {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_t thread;
    bool stopping;
    double timeout_ms;
    bool quiet;
    char answer[512]; /* the whole 408 answer */
    size_t answer_len;
    watch *head;
};

/* The body of the answer to a connection past its deadline (RFC 9110 15.5.9). */
static const char timeout_body[] =
    "{\"error\":{\"message\":\"the request did not arrive whole within the server's timeout\","
    "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"request_timeout\"}}";

/* Closes what is past its deadline (d->mu held). */
static void sweep(srv_deadlines *d) {
    double now = nu_time_ms();
    for (watch *w = d->head; w; w = w->next) {
        if (!w->receiving || now < w->deadline) continue;
        w->receiving = false;
        /* A kept-alive connection is most likely just idle, and an answer it
         * did not ask for would be read as the answer to the next request its
         * client sends: it is closed quietly, as an idle timeout does. */
        if (!w->kept_alive) {
            ssize_t sent = send(w->fd, d->answer, d->answer_len, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)sent; /* best effort: the socket is shut down either way */
            if (!d->quiet)
                fprintf(stderr,
                        "nucleus: closed a connection whose request did not arrive within %g s\n",
                        d->timeout_ms / 1e3);
        }
        shutdown(w->fd, SHUT_RDWR);
    }
}

static void *watchdog(void *arg) {
    srv_deadlines *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->stopping) {
        sweep(d);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L; /* five sweeps a second */
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&d->wake, &d->mu, &ts);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

srv_deadlines *srv_deadlines_start(double timeout_s, bool quiet, char *msg, size_t cap) {
    srv_deadlines *d = calloc(1, sizeof *d);
    if (!d) return snprintf(msg, cap, "out of memory"), NULL;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->wake, NULL);
    d->timeout_ms = timeout_s * 1e3;
    d->quiet = quiet;
    d->answer_len =
        (size_t)snprintf(d->answer, sizeof d->answer,
                         "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                         sizeof timeout_body - 1, timeout_body);
    int rc = pthread_create(&d->thread, NULL, watchdog, d);
    if (rc != 0) {
        snprintf(msg, cap, "cannot start a thread: %s", strerror(rc));
        pthread_cond_destroy(&d->wake);
        pthread_mutex_destroy(&d->mu);
        free(d);
        return NULL;
    }
    return d;
}

void srv_deadlines_stop(srv_deadlines *d) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    while (d->head) { /* none left once the daemon has stopped; just in case */
        watch *w = d->head;
        d->head = w->next;
        free(w);
    }
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

void srv_deadlines_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    srv_deadlines *d = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        watch *w = info ? calloc(1, sizeof *w) : NULL;
        *socket_context = w;
        if (!w) return; /* out of memory: this connection has the idle timeout only */
        w->owner = d;
        w->fd = info->connect_fd;
        pthread_mutex_lock(&d->mu);
        w->receiving = true;
        w->deadline = nu_time_ms() + d->timeout_ms;
        w->next = d->head;
        if (d->head) d->head->prev = w;
        d->head = w;
        pthread_mutex_unlock(&d->mu);
        return;
    }
    watch *w = *socket_context;
    if (!w) return;
    pthread_mutex_lock(&d->mu);
    if (w->prev)
        w->prev->next = w->next;
    else
        d->head = w->next;
    if (w->next) w->next->prev = w->prev;
    pthread_mutex_unlock(&d->mu);
    free(w);
    *socket_context = NULL;
}

static watch *watch_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

void srv_deadlines_received(struct MHD_Connection *c) {
    watch *w = watch_of(c);
    if (!w) return;
    pthread_mutex_lock(&w->owner->mu);
    w->receiving = false;
    pthread_mutex_unlock(&w->owner->mu);
}

void srv_deadlines_next(struct MHD_Connection *c) {
    watch *w = c ? watch_of(c) : NULL;
    if (!w) return;
    pthread_mutex_lock(&w->owner->mu);
    w->receiving = true;
    w->kept_alive = true;
    /* idle for up to the timeout (libmicrohttpd's own timer closes it then),
     * and as long again to send a request begun just before: a client that
     * reuses the connection at the last moment is not cut off */
    w->deadline = nu_time_ms() + 2 * w->owner->timeout_ms;
    pthread_mutex_unlock(&w->owner->mu);
}

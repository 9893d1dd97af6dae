/* deadlines.h - a bound on how long a request may take to arrive.
 *
 * libmicrohttpd's connection timeout is an idle timeout: any byte restarts
 * it, so a client sending its headers one byte a second holds a connection
 * (and, with enough of them, every connection) for as long as it likes.
 * Here every connection that is waiting for a request gets a deadline:
 * its headers and body must have arrived within timeout seconds of the
 * connection opening (twice that after a previous answer on it ended: the
 * idle timeout's worth, then the time to send a request begun at its end). A watchdog
 * thread answers 408 (to a connection's first request; a kept-alive one is
 * closed quietly, as an idle timeout would) and shuts the socket of any
 * connection past its deadline; libmicrohttpd's thread for it then sees the socket end and
 * closes it. Once a request has arrived, the deadline no longer applies
 * (generation may take as long as it takes; the idle timeout still does). */
#ifndef NU_SRV_DEADLINES_H
#define NU_SRV_DEADLINES_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct srv_deadlines srv_deadlines;

/* Starts the watchdog; NULL with msg filled when it cannot. */
srv_deadlines *srv_deadlines_start(double timeout_s, bool quiet, char *msg, size_t cap);
/* Stops the watchdog (after the daemon has stopped) and frees it. */
void srv_deadlines_stop(srv_deadlines *d);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls: the deadlines). */
void srv_deadlines_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code);
/* The connection's request has arrived whole: no deadline until the next. */
void srv_deadlines_received(struct MHD_Connection *c);
/* The connection's answer has been sent and it stays open for another
 * request: that one's deadline starts now. */
void srv_deadlines_next(struct MHD_Connection *c);

#endif

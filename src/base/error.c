/* error.c - status names, error messages and the monotonic clock. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

nu_status nu_fail(nu_error *err, nu_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

const char *nu_status_name(nu_status status) {
    switch (status) {
    case NU_OK: return "ok";
    case NU_ERR_IO: return "i/o error";
    case NU_ERR_FORMAT: return "format error";
    case NU_ERR_UNSUPPORTED: return "unsupported";
    case NU_ERR_NOMEM: return "out of memory";
    case NU_ERR_INVALID_ARG: return "invalid argument";
    case NU_ERR_CONTEXT_FULL: return "context full";
    case NU_ERR_BUFFER_SMALL: return "buffer too small";
    case NU_ERR_NETWORK: return "network error";
    case NU_ERR_CHECKSUM: return "checksum mismatch";
    case NU_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

double nu_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void nu_free(void *p) {
    free(p);
}

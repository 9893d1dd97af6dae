/* error.h - filling a caller's nu_error (the library never prints). */
#ifndef NU_ERROR_H
#define NU_ERROR_H

#include "nucleus.h"

/* Sets err (if not NULL) to status and a printf-style message; returns status
 * so that `return nu_fail(err, NU_ERR_FORMAT, "...")` reads naturally. */
nu_status nu_fail(nu_error *err, nu_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

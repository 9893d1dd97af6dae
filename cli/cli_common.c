/* cli_common.c - helpers the subcommands share: whole files,
 * loading a model by path or hf: reference, and the download progress bar. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

void cli_error(const char *fmt, ...) {
    va_list ap;
    fputs("nucleus: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Reads f to its end into a growing buffer; NULL (errno set) on failure. */
static char *read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 == cap) {
            char *bigger = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!bigger) break;
            buf = bigger;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - 1 - n, f);
        n += k;
        if (k == 0) {
            if (ferror(f)) break;
            buf[n] = 0;
            *len = n;
            return buf;
        }
    }
    if (!errno) errno = ENOMEM;
    free(buf);
    return NULL;
}

/* "-" reads standard input. */
char *cli_read_file(const char *path, size_t *len) {
    bool from_stdin = strcmp(path, "-") == 0;
    FILE *f = from_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        cli_error("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t n = 0;
    errno = 0;
    char *text = read_stream(f, &n);
    int saved = errno;
    if (!from_stdin) fclose(f);
    if (!text) {
        cli_error("cannot read %s: %s", path, strerror(saved));
        return NULL;
    }
    if (len) *len = n;
    return text;
}

bool cli_resolve_model(const char *ref, char *path, size_t cap) {
    nu_error err;
    nu_status st = nu_resolve_model(ref, true, cli_progress, (void *)ref, path, cap, &err);
    cli_progress_end();
    if (st != NU_OK) cli_error("%s", err.message);
    return st == NU_OK;
}

nu_model *cli_load_model(const char *ref, nu_load_mode mode) {
    char path[4096];
    nu_error err;
    if (!cli_resolve_model(ref, path, sizeof path)) return NULL;
    nu_model_params params = nu_model_default_params();
    params.mode = mode;
    nu_model *model = NULL;
    if (nu_model_load(path, &params, &model, &err) != NU_OK) {
        cli_error("%s", err.message);
        return NULL;
    }
    const char *warning = nu_model_warning(model);
    if (warning && *warning) fprintf(stderr, "nucleus: warning: %s\n", warning);
    return model;
}

/* ------------------------------------------------------------------------ */
/* The download progress bar                                                */
/* ------------------------------------------------------------------------ */

enum { BAR_WIDTH = 24, LABEL_MAX = 32 };
#define REDRAW_SECONDS 0.1 /* a terminal bar is redrawn at most this often */
#define SPEED_AFTER 0.5    /* seconds before a speed (and ETA) is shown */

/* The one bar the CLI draws at a time. On a terminal it is redrawn in place
 * with \r; otherwise (a log file, a pipe) a line is written every 10%. */
static struct progress_bar {
    bool started;
    bool tty;
    bool drawn;          /* a terminal line is waiting for its newline */
    const char *label;   /* the file name of the reference */
    double t_start;      /* when the first report came */
    double t_drawn;      /* when the line was last drawn */
    uint64_t done_start; /* bytes already there (a resumed download) */
    int tenth;           /* last 10% step written (not a terminal) */
    int len;             /* length of the last terminal line */
} bar;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "1:05" or "2:03:07". */
static void format_eta(char *buf, size_t cap, double seconds) {
    long s = seconds > 359999 ? 359999 : (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, cap, "  ETA %ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, cap, "  ETA %ld:%02ld", s / 60, s % 60);
}

/* One line: name, meter, percent, amounts (MB, or GB for large files),
 * speed and time left; without a total just the amount and speed. */
static int render_bar(char *line, size_t cap, uint64_t done, uint64_t total, double speed) {
    double unit = (total ? total : done) >= 1e9 ? 1e9 : 1e6;
    const char *unit_name = unit > 1e6 ? "GB" : "MB";
    char rate[32] = "", eta[32] = "", meter[BAR_WIDTH + 1];
    if (speed > 0) snprintf(rate, sizeof rate, "  %.1f MB/s", speed / 1e6);
    if (!total)
        return snprintf(line, cap, "%.*s  %.1f %s%s", LABEL_MAX, bar.label, (double)done / unit,
                        unit_name, rate);
    double frac = done >= total ? 1.0 : (double)done / (double)total;
    int filled = (int)(frac * BAR_WIDTH);
    for (int i = 0; i < BAR_WIDTH; i++) meter[i] = i < filled ? '#' : '.';
    meter[BAR_WIDTH] = 0;
    if (speed > 0 && done < total) format_eta(eta, sizeof eta, (double)(total - done) / speed);
    return snprintf(line, cap, "%.*s [%s] %3d%%  %.1f/%.1f %s%s%s", LABEL_MAX, bar.label, meter,
                    (int)(frac * 100), (double)done / unit, (double)total / unit, unit_name, rate,
                    eta);
}

/* Starts a bar for a new download. */
static void bar_start(const char *ref, uint64_t done, double now) {
    const char *slash = ref ? strrchr(ref, '/') : NULL;
    bar = (struct progress_bar){.started = true, .tty = isatty(STDERR_FILENO) == 1};
    bar.label = slash ? slash + 1 : ref ? ref : "download";
    bar.t_start = now;
    bar.done_start = done;
    bar.tenth = -1;
}

/* A nu_progress_callback; user is the model reference (for its name). */
void cli_progress(void *user, uint64_t done, uint64_t total) {
    double now = now_seconds();
    if (!bar.started) bar_start(user, done, now);
    double elapsed = now - bar.t_start;
    double speed = elapsed >= SPEED_AFTER && done > bar.done_start
                       ? (double)(done - bar.done_start) / elapsed
                       : 0;
    bool finished = total && done >= total;
    char line[256];
    if (bar.tty) {
        if (bar.drawn && !finished && now - bar.t_drawn < REDRAW_SECONDS) return;
        int n = render_bar(line, sizeof line, done, total, speed);
        fprintf(stderr, "\r%s%*s", line, bar.len > n ? bar.len - n : 0, "");
        fflush(stderr);
        bar.len = n;
        bar.drawn = true;
        bar.t_drawn = now;
    } else if (total) {
        int tenth = finished ? 10 : (int)(10 * done / total);
        if (tenth == bar.tenth) return;
        bar.tenth = tenth;
        render_bar(line, sizeof line, done, total, speed);
        fprintf(stderr, "%s\n", line);
    }
}

/* Ends the bar's line (if one was drawn) and forgets it. */
void cli_progress_end(void) {
    if (bar.tty && bar.drawn) fputc('\n', stderr);
    bar = (struct progress_bar){0};
}

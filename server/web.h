/* web.h - the web page `nucleus serve` answers at / : static files from
 * web/, turned into byte arrays at build time (cmake/embed_web.cmake writes
 * web_assets.c), so the binary needs nothing at run time. */
#ifndef NU_SRV_WEB_H
#define NU_SRV_WEB_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

struct srv_conn;

typedef struct srv_web_asset {
    const char *path;         /* "/index.html", "/js/app.js", ... */
    const char *content_type; /* with charset for text */
    const unsigned char *data;
    size_t size;
    const char *etag; /* a quoted hash of the content */
} srv_web_asset;

/* The generated table (web_assets.c). */
extern const srv_web_asset srv_web_assets[];
extern const size_t srv_web_n_assets;

/* The asset a URL names ("/" is /index.html), or NULL. */
const srv_web_asset *srv_web_find(const char *url);

/* Answers GET (or HEAD) of an asset: ETag revalidation (304), no-cache, and
 * a Content-Security-Policy that lets the page talk to this server only. */
enum MHD_Result srv_web_answer(struct MHD_Connection *c, struct srv_conn *cs, const char *url);

#endif

/* web.c - serving the embedded web page. Every file is revalidated on each
 * load (Cache-Control: no-cache with an ETag, 304 when unchanged): the
 * names carry no content hash, so a new binary's page is never mixed with a
 * cached old one. The Content-Security-Policy keeps the page's scripts,
 * styles and requests on this server. */
#include "web.h"

#include <string.h>

#include "http.h"

const srv_web_asset *srv_web_find(const char *url) {
    if (!strcmp(url, "/")) url = "/index.html";
    for (size_t i = 0; i < srv_web_n_assets; i++)
        if (!strcmp(srv_web_assets[i].path, url)) return &srv_web_assets[i];
    return NULL;
}

static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "connect-src 'self'; img-src 'self' data:; font-src 'self'; "
                          "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

enum MHD_Result srv_web_answer(struct MHD_Connection *c, srv_conn *cs, const char *url) {
    const srv_web_asset *a = srv_web_find(url);
    if (!a) {
        srv_error err;
        srv_fail(&err, 404, "invalid_request_error", "unknown_url", NULL, "no such file");
        return srv_answer_error(c, cs, &err);
    }
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-None-Match");
    bool fresh = inm && !strcmp(inm, a->etag);
    struct MHD_Response *resp =
        fresh ? MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT)
              : MHD_create_response_from_buffer(a->size, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    if (!fresh) MHD_add_response_header(resp, "Content-Type", a->content_type);
    MHD_add_response_header(resp, "ETag", a->etag);
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    if (!strcmp(a->content_type, "text/html; charset=utf-8"))
        MHD_add_response_header(resp, "Content-Security-Policy", csp);
    int status = fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    cs->status = status;
    cs->answered = true;
    return ret;
}

/* lab.h - the decoding lab's endpoints: what happens inside decoding, step
 * by step, with the real model (the web page's lab and any other client).
 *
 *   POST /v1/inspect                   each step: the candidates before and
 *                                      after every sampler stage, entropy,
 *                                      the greedy and the chosen token, the
 *                                      grammar's mask, watermark green flags
 *   POST /v1/inspect/beam              beam search's tree as it grows
 *   POST /v1/inspect/speculative       draft proposals accepted / rejected
 *                                      per verification pass, speedup
 *   POST /v1/inspect/self_consistency  several sampled paths and their vote
 *
 * Lab work does not go through the engine's scheduler: one lab thread owns
 * its own nu_context (and a draft model's, when asked) made on first use,
 * and runs one lab request at a time from a bounded queue. The model is
 * shared read-only, as every context shares it; no context is touched by
 * two threads. README's server section documents the shapes. */
#ifndef NU_SRV_LAB_H
#define NU_SRV_LAB_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "nucleus.h"
#include "openai_params.h"

struct srv_state;
struct srv_conn;

typedef enum lab_kind {
    LAB_INSPECT = 0,
    LAB_BEAM,
    LAB_SPECULATIVE,
    LAB_SELF_CONSISTENCY,
} lab_kind;

typedef struct srv_lab srv_lab;

typedef struct srv_lab_config {
    const nu_model *model;
    const nu_model *draft; /* the server's --draft model, or NULL */
    int32_t n_ctx;         /* cells of the lab's context (its longest text) */
    int32_t n_batch;
    int32_t n_threads;
    nu_kv_type kv_type, kv_type_k, kv_type_v;
    int32_t max_queue; /* lab requests waiting at most */
} srv_lab_config;

/* Starts the lab thread (no context yet); false with msg on failure. */
bool srv_lab_start(const srv_lab_config *cfg, srv_lab **out, char *msg, size_t cap);
/* Refuses new requests (503), ends what is queued or running (its clients
 * get a 503 error event) and joins the thread. */
void srv_lab_stop(srv_lab *lab);
/* Stops the lab if needed and frees it (after every connection is closed). */
void srv_lab_free(srv_lab *lab);

/* Answers a lab request whose body is complete. */
enum MHD_Result srv_lab_handle(struct srv_state *s, struct MHD_Connection *c, struct srv_conn *cs,
                               lab_kind kind);

#endif

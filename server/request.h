/* request.h - what every API's endpoints share between parsing a request
 * and writing its answer: the model a body names (held while it is used),
 * JSON bodies with a fixed set of members, tokenizing, and a parsed
 * generation request turned into a job on its model's engine (prompts
 * rendered and tokenized, limits applied, constraint compiled) and waited
 * for. The OpenAI endpoints (routes.c), Ollama's (ollama.c) and the
 * embeddings (embeddings.c) build on these; each writes its own shapes. */
#ifndef NU_SRV_REQUEST_H
#define NU_SRV_REQUEST_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "http.h"

/* The model a JSON body's "model" member names (NULL when absent), as a
 * malloc'd string. False with a 400 when the body is not a JSON object or
 * "model" is not a string. */
bool srv_body_model(const char *body, size_t len, char **model, srv_error *err);

/* Holds the model the request's body names (the first model when it names
 * none; models.h): NULL with err filled (400, 404, 503, 500). */
srv_model *srv_acquire_body_model(srv_state *s, const srv_conn *cs, srv_error *err);

/* Parses a JSON body whose members must all be in `allowed` (NULL-ended):
 * NULL with a 400 for invalid JSON, a body that is not an object, or an
 * unknown member. */
cJSON *srv_parse_body(const srv_conn *cs, const char *const *allowed, srv_error *err);

/* Tokenizes text into a malloc'd array; NULL with err filled (param names
 * the field the text came from). */
int32_t *srv_tokenize(const nu_model *m, const char *text, unsigned flags, const char *param,
                      int32_t *n_out, srv_error *err);

/* Token ids of m's vocabulary from a JSON array, into a malloc'd array;
 * NULL with a 400 ("WHERE must hold token ids (0..N)", param named) for
 * anything else. An empty array gives a non-NULL array and *n 0. */
int32_t *srv_token_ids(const nu_model *m, const cJSON *arr, const char *param, const char *where,
                       int32_t *n, srv_error *err);

/* The request's constraint (response_format, grammar, regex or choice) as
 * a grammar over m's vocabulary (*out NULL when there is none); a bad
 * schema, grammar or pattern is a 400 naming the field. */
bool srv_compile_constraint(const nu_model *m, const srv_request *r, nu_grammar **out,
                            srv_error *err);

/* A random generation seed. */
uint64_t srv_random_seed(void);

/* Makes the job of a parsed request on the held model m and queues it on
 * m's engine. Takes over both the hold and the request, whatever happens:
 * on success the job holds m; NULL with err filled on failure. The prompt
 * tokens are counted in cs. The caller has one reference to the job. */
srv_job *srv_submit(srv_state *s, srv_model *m, srv_request *req, srv_conn *cs, srv_error *err);

/* The number of tokens of a chat request's prompt on the held model m, rendered
 * as generation would render it (Anthropic's count_tokens); frees req, not the
 * hold. False with err filled (a prompt over the limit is a 413). */
bool srv_count_prompt_tokens(const srv_model *m, srv_request *req, int32_t *n, srv_error *err);

/* Waits until the job is done; false when the client left first (the job
 * is then cancelled and released, and cs->status is 499). */
bool srv_await(srv_job *job, struct MHD_Connection *c, srv_conn *cs);

/* Before a stream's first byte: waits until the scheduler has taken the
 * job, so that whatever it refuses is still a plain error status rather
 * than an error event after 200. True: the stream may start. False: *ret
 * is the answer (the error, or MHD_NO when the client left) and the job is
 * released. */
bool srv_await_start(srv_job *job, struct MHD_Connection *c, srv_conn *cs, enum MHD_Result *ret);

/* Non-streaming: waits for the job, then answers with body(job, arg) (a
 * malloc'd JSON text) or the error it failed with, and releases it. */
enum MHD_Result srv_answer_job(struct MHD_Connection *c, srv_conn *cs, srv_job *job,
                               char *(*body)(const srv_job *job, const void *arg), const void *arg);

/* Cancels the job (nothing happens to one that is done) and releases the
 * caller's reference: a stream's end, or an answer that could not be made. */
void srv_job_drop(srv_job *job);

/* The error a failed job ended with. */
void srv_job_error(const srv_job *job, srv_error *err);

#endif

/* ollama.h - Ollama's API, for the tools that speak it (Open WebUI, the
 * `ollama` client libraries, editors):
 *
 *   POST /api/chat       chat, streamed as NDJSON (Ollama's default) or not
 *   POST /api/generate   a prompt through the chat template, or raw
 *   POST /api/embed      embeddings of a text or a list of texts
 *   POST /api/embeddings the older single-text form
 *   GET  /api/tags       the models (every one the server knows)
 *   GET  /api/ps         the loaded ones
 *   POST /api/show       a model's details, metadata and chat template
 *   GET  /api/version    the API level served
 *
 * Requests are read with Ollama's names (options.num_predict, num_ctx,
 * temperature, top_k, top_p, min_p, typical_p, seed, stop, repeat_penalty,
 * repeat_last_n, presence_penalty, frequency_penalty, mirostat, ...;
 * format "json" or a schema; keep_alive; tools) and turned into the same
 * request the OpenAI endpoints run, so sampling, constraints and function
 * calling mean the same everywhere; `think` (true, false or a level) sets
 * the template's thinking switch as reasoning_effort does, and thinking
 * comes back as message.thinking. Defaults are Ollama's (temperature 0.8,
 * top_k 40, top_p 0.9, repeat_penalty 1.1, repeat_last_n 64). Options that
 * set hardware (num_gpu, num_thread, num_batch, use_mmap, ...) are checked
 * and have no effect: the server fixes them at start. What nucleus cannot
 * do (images, suffix, a Go template, the deprecated context) is
 * refused by name; so is any field or option Ollama does not define.
 * Errors are Ollama's shape, {"error": "..."}, with the HTTP status. */
#ifndef NU_SRV_OLLAMA_H
#define NU_SRV_OLLAMA_H

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "http.h"

/* Answers a request to one of the /api/ routes. */
enum MHD_Result srv_ollama_handle(srv_state *s, struct MHD_Connection *c, srv_conn *cs);

/* Shared by ollama.c and ollama_info.c. Errors go out through
 * srv_answer_error, which writes Ollama's shape under /api/. */
/* Checks options' names and values (Ollama's list, ollama.c). */
bool srv_ollama_check_options(const cJSON *opts, srv_error *err);
/* {"model": id, "created_at": now in RFC 3339 with microseconds}. */
cJSON *srv_ollama_head(const char *model_id);
/* Unix seconds as RFC 3339 ("2024-06-04T14:38:31Z"); out holds 40 bytes. */
void srv_ollama_time(double unix_seconds, char *out, size_t cap);
/* keep_alive: seconds (a number), or a Go duration ("5m", "1h30m", "-1");
 * *ms < 0: stay loaded. False with a 400 for anything else. */
bool srv_ollama_keep_alive(const cJSON *v, double *ms, srv_error *err);

enum MHD_Result srv_ollama_generate(srv_state *s, struct MHD_Connection *c, srv_conn *cs,
                                    bool chat);
enum MHD_Result srv_ollama_info(srv_state *s, struct MHD_Connection *c, srv_conn *cs);

#endif

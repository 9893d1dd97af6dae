/* cli_json.c - the JSON the commands print with --json. */
#include "cli_json.h"

#include <math.h>

#include "utf8.h"

void json_string(FILE *f, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t len = nu_utf8_decode(s + i, n - i, NULL);
        if (len == 0) {
            fputs("\\ufffd", f);
            i++;
        } else if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            i++;
        } else if (c == '\n') {
            fputs("\\n", f), i++;
        } else if (c == '\t') {
            fputs("\\t", f), i++;
        } else if (c == '\r') {
            fputs("\\r", f), i++;
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else {
            fwrite(u + i, 1, len, f);
            i += len;
        }
    }
    fputc('"', f);
}

void json_number(FILE *f, double x) {
    if (isfinite(x))
        fprintf(f, "%.9g", x);
    else
        fputs("null", f);
}

void json_token_text(FILE *f, const nu_model *m, int32_t token) {
    char buf[1024];
    size_t n = nu_token_to_bytes(m, token, true, buf, sizeof buf);
    json_string(f, buf, n < sizeof buf ? n : sizeof buf);
}

static void json_logprob(FILE *f, const nu_model *m, const nu_token_logprob *lp) {
    fprintf(f, "{\"token\": %d, \"text\": ", lp->token);
    json_token_text(f, m, lp->token);
    fputs(", \"logprob\": ", f);
    json_number(f, lp->logprob);
    fputs(", \"top\": [", f);
    for (int32_t k = 0; k < lp->n_top; k++) {
        fprintf(f, "%s{\"token\": %d, \"text\": ", k ? ", " : "", lp->top[k].token);
        json_token_text(f, m, lp->top[k].token);
        fputs(", \"logprob\": ", f);
        json_number(f, lp->top[k].logprob);
        fputc('}', f);
    }
    fputs("]}", f);
}

void json_result(FILE *f, const nu_model *m, const nu_generate_result *r) {
    fprintf(f, "{\"index\": %d, \"text\": ", r->index);
    json_string(f, r->text ? r->text : "", r->text_len);
    fprintf(f,
            ", \"finish_reason\": \"%s\", \"prompt_tokens\": %d, \"completion_tokens\": %d, "
            "\"sum_logprob\": ",
            nu_finish_reason_name(r->finish), r->n_prompt, r->n_generated);
    json_number(f, r->sum_logprob);
    fputs(", \"score\": ", f);
    json_number(f, r->score);
    fputs(", \"tokens\": [", f);
    for (int32_t i = 0; i < r->n_tokens; i++) fprintf(f, "%s%d", i ? ", " : "", r->tokens[i]);
    fputs("]", f);
    if (r->logprobs) {
        fputs(", \"logprobs\": [", f);
        for (int32_t i = 0; i < r->n_logprobs; i++) {
            if (i) fputs(", ", f);
            json_logprob(f, m, &r->logprobs[i]);
        }
        fputs("]", f);
    }
    fputs("}\n", f);
}

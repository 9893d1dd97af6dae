/* bans.h - banned strings and token sequences inside the sampler (internal).
 *
 * Banned token sequences are matched against the end of the generated
 * tokens. Banned strings are matched on bytes by an Aho-Corasick automaton
 * fed with the text of each accepted token: its state is the longest end of
 * the generated text that begins a banned string. From a state, the tokens
 * whose text would reach a match are found by running every token's text
 * through the automaton, once per state (the list is kept: states are
 * few, and the text mostly stays in the first). */
#ifndef NU_BANS_H
#define NU_BANS_H

#include "nucleus.h"

typedef struct nu_bans {
    int32_t n_vocab;
    /* banned token sequences: seq_tokens[seq_start[i] .. + seq_len[i]) */
    int32_t *seq_tokens, *seq_start, *seq_len;
    int32_t n_seqs, max_seq_len;
    /* the automaton: node 0 is the root; children as first-child and
     * next-sibling lists; out marks nodes where some string ends (at the
     * node or at one of its suffixes) */
    int32_t n_nodes;
    int32_t *child, *sibling, *fail;
    unsigned char *byte;
    bool *out;
    int32_t state;
    /* the text of every token: texts[text_off[t] .. text_off[t + 1]) */
    char *texts;
    size_t *text_off;
    /* per state, the tokens that would complete a string (computed when
     * the state is first reached) */
    int32_t **lists;
    int32_t *list_len;
    bool *listed;
    /* a token set for arrays not indexed by id: t is in it when mark[t] == epoch */
    uint32_t *mark;
    uint32_t epoch;
} nu_bans;

/* Prepares b from checked parameters; model may be NULL when there are no
 * banned strings. */
nu_status nu_bans_init(nu_bans *b, const nu_sampler_params *p, const nu_model *model,
                       int32_t n_vocab, nu_error *err);
/* Whether there is anything to ban. */
bool nu_bans_on(const nu_bans *b);
/* A token was generated: its text moves the automaton. */
void nu_bans_accept(nu_bans *b, int32_t token);
/* A new generation starts. */
void nu_bans_reset(nu_bans *b);
/* Bans the candidates that would complete a banned string or sequence, given
 * the generated tokens gen[0..n_gen) (their last ones suffice). */
void nu_bans_apply(nu_bans *b, const int32_t *gen, size_t n_gen, nu_candidates *c, bool identity);
void nu_bans_free(nu_bans *b);

#endif

/* recurrent.h - layers whose state runs from token to token (internal):
 * where each entry's state comes from and goes in the cache's state slots,
 * and the Gated DeltaNet layer. */
#ifndef NU_RECURRENT_H
#define NU_RECURRENT_H

#include "context.h"

/* Whether the model has layers with a recurrent state. */
bool nu_model_recurrent(const nu_model *m);

/* Before a batch's layers run: the state slot each entry reads (its
 * sequence's previous position; -1 for a zero state) and writes. Every
 * sequence's last entry gets a slot of its own (its new current state), as
 * do, while slots can be freed, entries that ask for logits and the entry
 * before a sequence's last (positions a caller may roll back to: the
 * proposals of speculative decoding, a prompt read again for its last
 * logits); the others are updated in place in the slot of the next kept
 * entry. The slots the batch uses are busy until nu_state_done. Never fails:
 * a context has at least two slots per sequence. */
void nu_state_plan(nu_context *c, const nu_batch_entry *e, int32_t n);
void nu_state_done(nu_context *c);

/* A Gated DeltaNet layer over the batch: its input is the normed xb, its
 * output (before the residual add) goes to q. */
void nu_deltanet_block(nu_context *c, const nu_layer *l, int32_t il, int32_t n);

#endif

/* eval.h - the parts of the text metrics (src/eval) that share code beyond
 * eval_text.h. */
#ifndef NU_EVAL_H
#define NU_EVAL_H

#include "eval_text.h"
#include "nucleus.h"

/* sacreBLEU's preprocessing of a segment: lowercased (if asked),
 * right-stripped and tokenized by tok, as code points in c (bleu_tokenize.c).
 * False when out of memory. */
bool nu_bleu_tokenize(nu_bleu_tokenizer tok, bool lowercase, const char *text, nu_cps *c);

/* The Porter stemmer as NLTK's PorterStemmer (NLTK_EXTENSIONS) applies it,
 * on the n lowercase ASCII letters and digits of s, in place; returns the
 * stem's length (never more than n) (porter.c). */
size_t nu_porter_stem(char *s, size_t n);

#endif

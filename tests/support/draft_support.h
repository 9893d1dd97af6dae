/* draft_support.h - what the speculative-decoding tests share: draft models
 * made from a target by the library's own quantiser (a close copy, or one
 * whose output layer is scaled so that it disagrees or is too sure), and
 * the chi-square test their sampled outputs go through. */
#ifndef NU_DRAFT_SUPPORT_H
#define NU_DRAFT_SUPPORT_H

#include "nucleus.h"

/* Multiplies every q8_0 block scale of output.weight in a written GGUF file
 * by factor: -1 turns the model's preferences upside down, 4 sharpens
 * them. Returns 0, or -1 when the file has no q8_0 output.weight. */
int nu_test_scale_output(const char *path, float factor);

/* Writes src quantised to type ("q8_0", "q4_0", ...) to the test scratch
 * directory as name, multiplies its output scales by factor unless factor is
 * 1 (type must then be q8_0), and loads it. NULL on any failure. */
nu_model *nu_test_make_draft(const char *src, const char *name, const char *type, float factor);

/* Chi-square of counts against expected frequencies over n bins, bins with
 * expected < 5 merged into one; *df gets the degrees of freedom. */
double nu_test_chi_square(const double *observed, const double *expected, int n, int *df);

/* The critical chi-square value at p = 0.001 (Wilson-Hilferty
 * approximation, within 1% for df >= 3). */
double nu_test_chi2_critical(int df);

#endif

/* test_rng.h - the tests' deterministic random numbers: splitmix64, seeded
 * with `rng r = {seed};`. Expected outcomes of the kernel tests depend on
 * the exact stream, so these must not change. Header-only (static inline)
 * so each test keeps its own copy and the compiler can inline the draws. */
#ifndef NU_TEST_RNG_H
#define NU_TEST_RNG_H

#include <stdint.h>

typedef struct rng {
    uint64_t s;
} rng;

/* splitmix64. */
static inline uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float rng_sym(rng *r) {
    return (float)((double)(rng_next(r) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

#endif

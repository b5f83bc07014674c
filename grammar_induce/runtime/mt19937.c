/* torch's CPU generator (a Mersenne Twister, ATen/core/MT19937RNGEngine.h) run in C: the same 32-bit words in the
 * same order, from the same state, so that a draw made here equals torch's own (runtime/draws.py checks that it does
 * before using it). torch draws one word at a time through a function call and a lock; here a block of words up to
 * the next regeneration of the state is tempered in one vectorized loop.
 *
 * The state is torch's, as its saved states hold it: 624 words, each in a uint64, and the engine's `left` and `next`
 * (a word is taken after `--left`, and the state is regenerated when that reaches 0).
 */
#include <stdint.h>

#define N 624
#define M 397

static uint32_t twist(uint32_t u, uint32_t v)
{
    return (((u & 0x80000000u) | (v & 0x7fffffffu)) >> 1) ^ (v & 1u ? 0x9908b0dfu : 0u);
}

static void regenerate(uint32_t *s)
{
    int j = 0;
    for (; j < N - M; j++)
        s[j] = s[j + M] ^ twist(s[j], s[j + 1]);
    for (; j < N - 1; j++)
        s[j] = s[j + M - N] ^ twist(s[j], s[j + 1]);
    s[N - 1] = s[M - 1] ^ twist(s[N - 1], s[0]);
}

static uint32_t temper(uint32_t y)
{
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* `count` words into `out`, advancing the state (`left`, `next`) exactly as `count` calls of torch's engine. */
static void words(uint32_t *restrict state, int32_t *left, int32_t *next, int64_t count, uint32_t *restrict out)
{
    int64_t i = 0;
    while (i < count) {
        int64_t take = *left - 1; /* words before the next regeneration */
        if (take > count - i)
            take = count - i;
        const uint32_t *from = state + *next;
        for (int64_t k = 0; k < take; k++)
            out[i + k] = temper(from[k]);
        *next += (int32_t)take;
        *left -= (int32_t)take;
        i += take;
        if (i < count) { /* the call that regenerates: its word is the new state's first */
            regenerate(state);
            *left = N;
            *next = 1;
            out[i++] = temper(state[0]);
        }
    }
}

/* torch.randint(-2**63, 2**63 - 1, (count,), dtype=torch.int64): each value from two words, the first the high half
 * (torch's random64), reduced modulo the range 2**64 - 1 (which maps only 2**64 - 1 to 0) and shifted by its start.
 * Words are made a block at a time in a buffer that stays in the cache, so `out` is written once. */
void full_range_int64(uint64_t *saved_words, int32_t *left, int32_t *next, int64_t count, int64_t *out)
{
    enum { BLOCK = 1024 };
    uint32_t state[N], halves[2 * BLOCK];
    for (int j = 0; j < N; j++)
        state[j] = (uint32_t)saved_words[j];
    for (int64_t start = 0; start < count; start += BLOCK) {
        const int64_t size = count - start < BLOCK ? count - start : BLOCK;
        words(state, left, next, 2 * size, halves);
        for (int64_t k = 0; k < size; k++) {
            const uint64_t value = (uint64_t)halves[2 * k] << 32 | halves[2 * k + 1];
            out[start + k] = (int64_t)((value == UINT64_MAX ? 0u : value) + 0x8000000000000000u);
        }
    }
    for (int j = 0; j < N; j++)
        saved_words[j] = state[j];
}

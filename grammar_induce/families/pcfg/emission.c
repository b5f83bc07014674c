/* The emission's softmax over the vocabulary, read at a batch's words (emission.py), one pass over the logits forward
 * and one backward, instead of five tensor ops over (T, V) each way (log_softmax, the reading; the softmax, its scaling,
 * the words' gradients added, the cast to bfloat16 for the backward's products, the bias's column sums).
 *
 * The logits (T, V) are bfloat16, as the product in bfloat16 gives them (read in full: half the bytes); sums, the
 * softmax and the gradients are float32. runtime/native.py compiles it on first use, with OpenMP where the compiler
 * has it: each thread writes rows of its own (the bias's column sums: per thread, added at the end).
 *
 *   forward:   log_z[t] = log sum_v exp(logits[t][v]);   out[t][k] = logits[t][words[k]] - log_z[t]   (k < count)
 *   backward:  grad[t][v] = by_word-sum at v - softmax[t][v] * sum_k by_word[t][k],   written as bfloat16
 *              (round to nearest even, as torch casts), and grad_bias[v] = sum_t grad[t][v] in float32
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static inline float from_bf16(uint16_t v)
{
    uint32_t bits = (uint32_t)v << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);  /* round to nearest even (finite values) */
}

static inline int thread_number(void)  /* this thread's number in the parallel loop (0 without OpenMP) */
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static float row_log_z(const uint16_t *row, long vocab, float *scratch)
{
    float top = from_bf16(row[0]);
    for (long v = 0; v < vocab; v++) {
        scratch[v] = from_bf16(row[v]);
        top = scratch[v] > top ? scratch[v] : top;
    }
    float sum = 0.0f;
    for (long v = 0; v < vocab; v++)
        sum += expf(scratch[v] - top);
    return top + logf(sum);
}

/* logits (rows, vocab) bfloat16; words (count); log_z (rows) out; out (rows, count) out; scratch (threads, vocab) */
void forward(long rows, long vocab, long count, const uint16_t *logits, const int64_t *words, float *log_z,
             float *out, float *scratch, int threads)
{
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (long t = 0; t < rows; t++) {
        const int me = thread_number();
        const uint16_t *row = logits + t * vocab;
        log_z[t] = row_log_z(row, vocab, scratch + me * vocab);
        for (long k = 0; k < count; k++)
            out[t * count + k] = from_bf16(row[words[k]]) - log_z[t];
    }
}

/* by_word (rows, count): the gradient at each word; grad (rows, vocab) bfloat16 out; bias_parts (threads, vocab)
 * zeros in, each thread's column sums; scratch (threads, vocab) */
void backward(long rows, long vocab, long count, const uint16_t *logits, const int64_t *words, const float *log_z,
              const float *by_word, uint16_t *grad, float *bias_parts, float *scratch, int threads)
{
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (long t = 0; t < rows; t++) {
        const int me = thread_number();
        const uint16_t *row = logits + t * vocab;
        const float *g = by_word + t * count;
        float *values = scratch + me * vocab, *bias = bias_parts + me * vocab, total = 0.0f;
        for (long k = 0; k < count; k++)
            total += g[k];
        for (long v = 0; v < vocab; v++)
            values[v] = -total * expf(from_bf16(row[v]) - log_z[t]);
        for (long k = 0; k < count; k++)
            values[words[k]] += g[k];
        for (long v = 0; v < vocab; v++) {
            grad[t * vocab + v] = to_bf16(values[v]);
            bias[v] += values[v];
        }
    }
}

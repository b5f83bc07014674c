/* The TN-PCFG's sums over split points (structures/rank_cfg.py, `_combine` and `_outside`), one span at a time.
 *
 * The same maths as the tensor ops of model.py (which run where this cannot be built), in one pass over each span's
 * children instead of two or three tensor ops per split point, each a pass over every span of the width: the sums
 * are bound by memory traffic, and Python's loop over the split points goes too. runtime/native.py compiles it
 * on first use, with OpenMP where the compiler has it: each thread writes rows of its own.
 *
 * A chart's tensor of width d (its spans' values as a left child, left[d], or as a right child, right[d], and their
 * gradients) is given by its address and two strides in elements: between sentences and between spans (its rank
 * entries adjacent).
 *
 *   combine:  x[b][i] = sum_{d=1}^{w-1} weights[w][b][i][d-1] * left[d][b][i] * right[w-d][b][i+d]   (rows of rank;
 *             x and weights[w] contiguous: (batch, starts, rank), (batch, starts, w-1))
 *   outside:  the gradients at every span of width e as a left and as a right child, from the spans it is a child
 *             of (all wider, their gradients `spread` already known), each written once:
 *             grad_left[e][b][j] = sum_{w>e} spread[w][b][j] * weights[w][b][j][e-1] * right[w-e][b][j+e]
 *             grad_right[e][b][j] = sum_{d>=1} spread[d+e][b][j-d] * weights[d+e][b][j-d][d-1] * left[d][b][j-d]
 *             (the tensor ops instead add each span's share into its children's as they go: twice the traffic).
 * A split point of weight 0 (a child the chart constraints left out, or a span they did) is skipped: it adds 0.
 */
#include <stdint.h>
#include <string.h>

/* The chart's children are float32, or with -DBF16_CHILDREN bfloat16 (what a bfloat16 product gives: read in full,
 * half the bytes); x, the weights and the gradients are float32. */
#ifdef BF16_CHILDREN
typedef uint16_t child;
static inline float value(child v)
{
    uint32_t bits = (uint32_t)v << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
#else
typedef float child;
static inline float value(child v) { return v; }
#endif

typedef struct {
    void *data;
    int64_t batch_stride, span_stride;
} Part;

static inline const child *child_row(const Part *part, int64_t b, int64_t i)
{
    return (const child *)part->data + b * part->batch_stride + i * part->span_stride;
}

static inline float *grad_row(const Part *part, int64_t b, int64_t i)
{
    return (float *)part->data + b * part->batch_stride + i * part->span_stride;
}

void combine(int64_t batch, int64_t starts, int64_t w, int64_t rank, const Part *left, const Part *right,
             const float *weights, float *x)
{
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < starts; i++) {
            float *out = x + (b * starts + i) * rank;
            const float *share = weights + (b * starts + i) * (w - 1);
            for (int64_t k = 0; k < rank; k++)
                out[k] = 0.0f;
            for (int64_t d = 1; d < w; d++) {
                const child *l = child_row(&left[d], b, i), *r = child_row(&right[w - d], b, i + d);
                const float c = share[d - 1];
                if (c == 0.0f)  /* a child the chart constraints left out, or a span they did: nothing to add */
                    continue;
                for (int64_t k = 0; k < rank; k++)
                    out[k] += value(l[k]) * c * value(r[k]);
            }
        }
}

void outside(int64_t batch, int64_t n, int64_t e, int64_t rank, const Part *left, const Part *right,
             const Part *spread, const Part *weights, const Part *grad_left, const Part *grad_right)
{
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < batch; b++)
        for (int64_t j = 0; j < n - e + 1; j++) {
            float *gl = grad_row(&grad_left[e], b, j), *gr = grad_row(&grad_right[e], b, j);
            for (int64_t k = 0; k < rank; k++)
                gl[k] = gr[k] = 0.0f;
            for (int64_t w = n - j; w > e; w--) {  /* the left child of j..j+w, split after e words */
                const float *s = grad_row(&spread[w], b, j), c = grad_row(&weights[w], b, j)[e - 1];
                const child *r = child_row(&right[w - e], b, j + e);
                if (c == 0.0f)
                    continue;
                for (int64_t k = 0; k < rank; k++)
                    gl[k] += s[k] * c * value(r[k]);
            }
            for (int64_t d = j; d >= 1; d--) {  /* the right child of j-d..j+e (j <= n - e: it fits) */
                const float *s = grad_row(&spread[d + e], b, j - d), c = grad_row(&weights[d + e], b, j - d)[d - 1];
                const child *l = child_row(&left[d], b, j - d);
                if (c == 0.0f)
                    continue;
                for (int64_t k = 0; k < rank; k++)
                    gr[k] += s[k] * c * value(l[k]);
            }
        }
}

/* One time step of an ON-LSTM layer, forward and backward, for a whole batch, on the CPU (and, at the end, DropConnect
 * and the language model's bf16 loss).
 *
 * The same maths as _forward_step and the per-step loop of _backward_loop in recurrence.py, in
 * one pass over the step's data instead of a dozen tensor ops. runtime/native.py (through onlstm/native.py)
 * compiles it once for float and once with -DDOUBLE. All arrays are contiguous, row-major:
 *
 *   gates      (B, 2n + 4nC) gate logits [master input | master forget | o | cand | i | f], given as the input map
 *                            (real, or bfloat16 plus a float bias) and the hidden map's product (real or bfloat16)
 *   c_prev     (B, n, C)     the cell state before this step
 *   probs      (B, 2, n)     softmaxes of the master input and master forget logits
 *   acts       (B, 4, n, C)  o, tanh(candidate), i, f of this step (i^, f^ and tanh(c) the backward computes again)
 *   c, h       (B, n, C)     the step's cell state and output (c_step: c, read by the backward)
 *   grad_dist  (B, 2)        incoming gradients of the input and forget distances
 *   grad_h     (B, n, C)     incoming gradient of this step's output h
 *   dh_next    (B, n, C)     gradient reaching h from the next step's gates (zeros at the last step)
 *   dc         (B, n, C)     in: gradient of c from the next step; out: gradient of c_prev
 *   grad_gates (B, 2n + 4nC) gradient of the gate logits (in a row's scratch where only its bfloat16 copy is kept)
 *   grad_bias_rows (B, 2n + 4nC) per batch row, the gate logits' gradient summed over the steps so far (the biases')
 *
 * Under bf16 (runtime/precision.py) the products take and give bfloat16: the steps read them and write bfloat16
 * copies of h and of the gate gradients beside the float ones (the next products' inputs), so that no conversion
 * runs between steps. A bfloat16 value is the top half of a float's bits; rounding to it is to nearest even, as
 * torch rounds.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Built with OpenMP where the compiler has it (runtime/native.py): a batch's rows, or a weight's entries, are split
 * over torch's threads when there are at least this many units of work; every row is computed as alone. */
#define PARALLEL_FROM 4096
#define ACTS 4 /* activations kept per unit and step: o, tanh(candidate), i, f (recurrence.py's _Forward.acts) */

static uint16_t to_bf16(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN (rounding could carry it into infinity) */
        return (uint16_t)((bits >> 16) | 0x40u);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t half)
{
    const uint32_t bits = (uint32_t)half << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

#ifdef DOUBLE
typedef double real;
#define EXP exp
#define TANH tanh
#else
typedef float real;
#define EXP expf
#define TANH tanhf
#endif

/* Master gates i~ = 1 - cumax, f~ = cumax (eqs. 8-9) and their overlap w = i~ f~ (eq. 10), per unit. */
static void master_gates(int n, int chunk, const real *p_in, const real *p_forget, real *m_in, real *m_forget,
                         real *w)
{
    double cum_in = 0.0, cum_forget = 0.0;
    for (int j = 0; j < n; j++) {
        cum_in += p_in[j];
        cum_forget += p_forget[j];
        for (int k = j * chunk; k < (j + 1) * chunk; k++) {
            m_in[k] = (real)(1.0 - cum_in);
            m_forget[k] = (real)cum_forget;
            w[k] = m_in[k] * m_forget[k];
        }
    }
}

static void softmax(int n, const real *x, real *p)
{
    real top = x[0], sum = 0;
    for (int j = 1; j < n; j++)
        top = x[j] > top ? x[j] : top;
    for (int j = 0; j < n; j++) {
        p[j] = EXP(x[j] - top);
        sum += p[j];
    }
    for (int j = 0; j < n; j++)
        p[j] /= sum;
}

/* The gates and cell of one batch row; restrict on every array lets gcc vectorize over units. Only o, cand, in and
 * forget are kept for the backward: i^, f^ and tanh(c) it computes again (as here) from the master gates and c, which
 * costs less than writing them and reading them back (the step is bound by memory traffic). */
static void forward_units(int hidden, const real *restrict m_in, const real *restrict m_forget,
                          const real *restrict w, const real *restrict g_o, const real *restrict g_cand,
                          const real *restrict g_in, const real *restrict g_forget, const real *restrict c_prev,
                          real *restrict o, real *restrict cand, real *restrict in, real *restrict forget,
                          real *restrict c, real *restrict h)
{
    for (int u = 0; u < hidden; u++) {
        o[u] = 1 / (1 + EXP(-g_o[u]));
        cand[u] = TANH(g_cand[u]);
        in[u] = 1 / (1 + EXP(-g_in[u]));
        forget[u] = 1 / (1 + EXP(-g_forget[u]));
        const real in_hat = m_in[u] + w[u] * (in[u] - 1);             /* eq. 12: i w + (i~ - w) */
        const real forget_hat = m_forget[u] + w[u] * (forget[u] - 1); /* eq. 11 */
        c[u] = forget_hat * c_prev[u] + in_hat * cand[u];             /* eq. 13 */
        h[u] = o[u] * TANH(c[u]);                                     /* eq. 14 */
    }
}

/* One row's gate logits: the input map (real `gates` or bfloat16 `gates_bf16`), plus `bias` where not NULL, plus the
 * hidden map's product (real or bfloat16), added in that order as torch adds them. */
static void gate_logits(int width, const real *gates, const uint16_t *gates_bf16, const real *bias,
                        const real *product, const uint16_t *product_bf16, real *restrict out)
{
    for (int j = 0; j < width; j++)
        out[j] = gates_bf16 != NULL ? from_bf16(gates_bf16[j]) : gates[j];
    if (bias != NULL)
        for (int j = 0; j < width; j++)
            out[j] += bias[j];
    for (int j = 0; j < width; j++)
        out[j] += product_bf16 != NULL ? from_bf16(product_bf16[j]) : product[j];
}

void forward_step(int batch, int n, int chunk, const real *gates, const uint16_t *gates_bf16, const real *bias,
                  const real *product, const uint16_t *product_bf16, const real *c_prev, real *probs, real *acts,
                  real *c, real *h, uint16_t *h_bf16)
{
    const int hidden = n * chunk, width = 4 * hidden + 2 * n;
#pragma omp parallel for schedule(static) if (batch * hidden >= PARALLEL_FROM)
    for (int b = 0; b < batch; b++) {
        real m_in[hidden], m_forget[hidden], w[hidden], g[width];
        const size_t row = (size_t)b * width;
        gate_logits(width, gates_bf16 != NULL ? NULL : gates + row, gates_bf16 != NULL ? gates_bf16 + row : NULL, bias,
                    product_bf16 != NULL ? NULL : product + row, product_bf16 != NULL ? product_bf16 + row : NULL, g);
        const real *g_units = g + 2 * n;
        real *p = probs + (size_t)b * 2 * n, *a = acts + (size_t)b * ACTS * hidden, *h_row = h + (size_t)b * hidden;
        softmax(n, g, p);
        softmax(n, g + n, p + n);
        master_gates(n, chunk, p, p + n, m_in, m_forget, w);
        forward_units(hidden, m_in, m_forget, w, g_units, g_units + hidden, g_units + 2 * hidden,
                      g_units + 3 * hidden, c_prev + (size_t)b * hidden, a, a + hidden, a + 2 * hidden,
                      a + 3 * hidden, c + (size_t)b * hidden, h_row);
        if (h_bf16 != NULL)
            for (int u = 0; u < hidden; u++)
                h_bf16[(size_t)b * hidden + u] = to_bf16((float)h_row[u]);
    }
}

/* The element-wise gradients of one batch row's gate logits (d_o, d_cand, d_i, d_f), the terms summed per level
 * (dc_cand, dc_prev, dc_w: dc times candidate, c_prev and dc/dw), and the carry of dc (updated in place); a
 * function of its own so that restrict on every array lets gcc vectorize over units (as forward_units). */
static void backward_units(int hidden, const real *restrict o, const real *restrict cand, const real *restrict in,
                           const real *restrict forget, const real *restrict m_in, const real *restrict m_forget,
                           const real *restrict c, const real *restrict cp, const real *restrict gh,
                           const real *restrict dn, const real *restrict w, real *restrict d, real *restrict d_o,
                           real *restrict d_cand, real *restrict d_i, real *restrict d_f, real *restrict dc_cand,
                           real *restrict dc_prev, real *restrict dc_w)
{
    for (int u = 0; u < hidden; u++) {
        const real in_hat = m_in[u] + w[u] * (in[u] - 1), forget_hat = m_forget[u] + w[u] * (forget[u] - 1);
        const real tanh_c = TANH(c[u]); /* as forward_units computes them */
        const real dh = gh[u] + dn[u];
        const real dcu = d[u] + dh * o[u] * (1 - tanh_c * tanh_c);
        d_o[u] = dh * tanh_c * o[u] * (1 - o[u]);
        d_cand[u] = dcu * in_hat * (1 - cand[u] * cand[u]);
        d_i[u] = dcu * cand[u] * w[u] * in[u] * (1 - in[u]);
        d_f[u] = dcu * cp[u] * w[u] * forget[u] * (1 - forget[u]);
        dc_cand[u] = dcu * cand[u];
        dc_prev[u] = dcu * cp[u];
        dc_w[u] = dcu * (cp[u] * (forget[u] - 1) + cand[u] * (in[u] - 1)); /* dc/dw */
        d[u] = dcu * forget_hat;
    }
}

/* dh_next is real, or bfloat16 (dh_next_bf16, the hidden map's product); grad_gates_bf16, where not NULL, gets a
 * bfloat16 copy of grad_gates, and grad_gates may then be NULL (not kept). Each row's gradient is added to its row of
 * grad_bias_rows. */
void backward_step(int batch, int n, int chunk, const real *restrict acts, const real *restrict c_step,
                   const real *restrict c_prev, const real *restrict probs, const real *restrict grad_dist,
                   const real *restrict grad_h, const real *restrict dh_next, const uint16_t *restrict dh_next_bf16,
                   real *restrict dc, real *restrict grad_gates, uint16_t *restrict grad_gates_bf16,
                   real *restrict grad_bias_rows)
{
    const int hidden = n * chunk, width = 4 * hidden + 2 * n;
#pragma omp parallel for schedule(static) if (batch * hidden >= PARALLEL_FROM)
    for (int b = 0; b < batch; b++) {
        real d_in[n], d_forget[n], scratch[grad_gates != NULL ? 1 : width];
        real m_in[hidden], m_forget[hidden], w[hidden], dc_cand[hidden], dc_prev[hidden], dc_w[hidden];
        const real *o = acts + (size_t)b * ACTS * hidden, *cand = o + hidden, *in = cand + hidden;
        const real *forget = in + hidden, *cs = c_step + (size_t)b * hidden, *cp = c_prev + (size_t)b * hidden;
        const real *gh = grad_h + (size_t)b * hidden;
        const real *p_in = probs + (size_t)b * 2 * n, *p_forget = p_in + n;
        real *d = dc + (size_t)b * hidden, *out = grad_gates != NULL ? grad_gates + (size_t)b * width : scratch;
        real *d_o = out + 2 * n, *d_cand = d_o + hidden, *d_i = d_cand + hidden, *d_f = d_i + hidden;

        real dn[hidden];
        for (int u = 0; u < hidden; u++)
            dn[u] = dh_next_bf16 != NULL ? from_bf16(dh_next_bf16[(size_t)b * hidden + u]) : dh_next[(size_t)b * hidden + u];
        master_gates(n, chunk, p_in, p_forget, m_in, m_forget, w);
        backward_units(hidden, o, cand, in, forget, m_in, m_forget, cs, cp, gh, dn, w, d, d_o, d_cand, d_i, d_f,
                       dc_cand, dc_prev, dc_w);
        /* per level: gradients of i~ and f~, including the distances (mean i~, 1 - mean f~) */
        for (int j = 0; j < n; j++) {
            real s_cand = 0, s_prev = 0, s_w = 0;
            for (int k = j * chunk; k < (j + 1) * chunk; k++) {
                s_cand += dc_cand[k];
                s_prev += dc_prev[k];
                s_w += dc_w[k];
            }
            d_in[j] = s_cand + s_w * m_forget[j * chunk] + grad_dist[2 * b] / n;
            d_forget[j] = s_prev + s_w * m_in[j * chunk] - grad_dist[2 * b + 1] / n;
        }
        /* through the cumulative sums (reversed cumsums), then the softmaxes */
        real acc_in = 0, acc_forget = 0, dot_in = 0, dot_forget = 0;
        for (int j = n - 1; j >= 0; j--) {
            acc_in += d_in[j];
            acc_forget += d_forget[j];
            d_in[j] = -acc_in;
            d_forget[j] = acc_forget;
            dot_in += p_in[j] * d_in[j];
            dot_forget += p_forget[j] * d_forget[j];
        }
        for (int j = 0; j < n; j++) {
            out[j] = p_in[j] * (d_in[j] - dot_in);
            out[n + j] = p_forget[j] * (d_forget[j] - dot_forget);
        }
        if (grad_gates_bf16 != NULL)
            for (int j = 0; j < width; j++)
                grad_gates_bf16[(size_t)b * width + j] = to_bf16((float)out[j]);
        real *restrict bias_row = grad_bias_rows + (size_t)b * width;
        for (int j = 0; j < width; j++)
            bias_row[j] += out[j];
    }
}

/* DropConnect of a weight for one batch (the paper's mask: unscaled, one per batch), in one pass.
 *
 * Entry i is kept where bits[i], 16 random bits (model.keep_mask's draw), is at least `threshold` (p * 65536
 * rounded, less 32768: kept with probability 1 - p), and written to out (real) or, where out_bf16 is not NULL, to
 * out_bf16 rounded to bfloat16. */

void drop_connect(long count, const real *weight, const int16_t *bits, int threshold, real *out, uint16_t *out_bf16)
{
#pragma omp parallel for schedule(static) if (count >= PARALLEL_FROM)
    for (long i = 0; i < count; i++) {
        const int keep = bits[i] >= threshold;
        if (out_bf16 != NULL)
            out_bf16[i] = to_bf16(keep ? (float)weight[i] : 0.0f);
        else
            out[i] = keep ? weight[i] : 0;
    }
}

/* The gradient of drop_connect: grad (real, or bfloat16 where grad_bf16 is not NULL) where kept, else 0. */
void drop_connect_backward(long count, const real *grad, const uint16_t *grad_bf16, const int16_t *bits, int threshold,
                           real *out)
{
#pragma omp parallel for schedule(static) if (count >= PARALLEL_FROM)
    for (long i = 0; i < count; i++) {
        const real g = grad_bf16 != NULL ? from_bf16(grad_bf16[i]) : grad[i];
        out[i] = bits[i] >= threshold ? g : 0;
    }
}

/* Locked dropout under bf16 (recurrence.py's scale_steps): x (steps, width) times a mask (width) shared by every
 * step, from real to bfloat16 (out_bf16) or, its gradient, from bfloat16 (x_bf16) to real (out), in one pass. */
void scale_steps(long steps, long width, const real *x, const uint16_t *x_bf16, const real *mask, real *out,
                 uint16_t *out_bf16)
{
#pragma omp parallel for schedule(static) if (steps * width >= PARALLEL_FROM)
    for (long t = 0; t < steps; t++) {
        const size_t row = (size_t)t * width;
        if (out_bf16 != NULL)
            for (long j = 0; j < width; j++)
                out_bf16[row + j] = to_bf16((float)(x[row + j] * mask[j]));
        else
            for (long j = 0; j < width; j++)
                out[row + j] = from_bf16(x_bf16[row + j]) * mask[j];
    }
}

/* The language model's loss under bf16 (decoder.py): the cross entropy of bfloat16 logits (rows, vocab) plus a float
 * bias. cross_entropy_rows gives each row's log-probability of its target, in one pass over the row for its largest
 * logit and one (the row still in the cache) for its log-sum-exp. */
void cross_entropy_rows(int rows, int vocab, const uint16_t *logits, const float *bias, const int64_t *targets,
                        float *target_log_prob)
{
#pragma omp parallel for schedule(static) if ((long)rows * vocab >= PARALLEL_FROM)
    for (int r = 0; r < rows; r++) {
        const uint16_t *row = logits + (size_t)r * vocab;
        float top = from_bf16(row[0]) + bias[0], sum = 0; /* not -INFINITY: -ffast-math assumes no infinities */
        for (int j = 1; j < vocab; j++) {
            const float x = from_bf16(row[j]) + bias[j];
            top = x > top ? x : top;
        }
        for (int j = 0; j < vocab; j++)
            sum += expf(from_bf16(row[j]) + bias[j] - top);
        target_log_prob[r] = from_bf16(row[targets[r]]) + bias[targets[r]] - top - logf(sum);
    }
}

/* cross_entropy_rows, and the loss's gradient made while each row is in the cache: (softmax - one-hot) * scale
 * written over the row's logits in bfloat16, and summed over rows for the bias. The rows are split into `parts`
 * (at most the threads), each with its own scratch (2 x vocab floats: the row's exponentials, its part's bias sums),
 * and the parts' sums are added in their order (the same sums whatever the threads' timing). */
void cross_entropy_with_gradient(int rows, int vocab, int parts, uint16_t *logits, const float *bias,
                                 const int64_t *targets, float scale, float *target_log_prob, float *scratch,
                                 float *grad_bias)
{
    const int parallel = (long)rows * vocab >= PARALLEL_FROM;
#pragma omp parallel for schedule(static) num_threads(parts) if (parallel)
    for (int part = 0; part < parts; part++) {
        float *restrict e = scratch + (size_t)part * 2 * vocab, *restrict bias_sum = e + vocab;
        memset(bias_sum, 0, (size_t)vocab * sizeof *bias_sum);
        for (int r = (int)((long)rows * part / parts); r < (int)((long)rows * (part + 1) / parts); r++) {
            uint16_t *row = logits + (size_t)r * vocab;
            float top = from_bf16(row[0]) + bias[0], sum = 0;
            for (int j = 0; j < vocab; j++) {
                e[j] = from_bf16(row[j]) + bias[j];
                top = e[j] > top ? e[j] : top;
            }
            const int64_t target = targets[r];
            const float target_logit = e[target];
            for (int j = 0; j < vocab; j++) {
                e[j] = expf(e[j] - top);
                sum += e[j];
            }
            target_log_prob[r] = target_logit - top - logf(sum);
            const float inverse = 1 / sum;
            for (int j = 0; j < vocab; j++) {
                const float g = (e[j] * inverse - (j == target)) * scale;
                bias_sum[j] += g;
                row[j] = to_bf16(g);
            }
        }
    }
#pragma omp parallel for schedule(static) if (parallel)
    for (int j = 0; j < vocab; j++) {
        float total = 0;
        for (int part = 0; part < parts; part++)
            total += scratch[(size_t)part * 2 * vocab + vocab + j];
        grad_bias[j] = total;
    }
}

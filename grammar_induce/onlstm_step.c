/* One step of backpropagation through time of an ON-LSTM layer, for one batch, on the CPU.
 *
 * The same maths as _Recurrence.backward's per-step loop in model.py, in one pass over the
 * step's data instead of a dozen tensor ops. Compiled by grammar_induce/native.py with
 * -DREAL=float and -DREAL=double. All arrays are contiguous, row-major:
 *
 *   acts       (B, 7, n, C)  forward's o, tanh(candidate), i, f, i^, f^, tanh(c) of this step
 *   c_prev     (B, n, C)     the cell state before this step
 *   probs      (B, 2, n)     softmaxes of the master input and master forget logits
 *   grad_dist  (B, 2)        incoming gradients of the input and forget distances
 *   grad_h     (B, n, C)     incoming gradient of this step's output h
 *   dh_next    (B, n, C)     gradient reaching h from the next step's gates (zeros at the last step)
 *   dc         (B, n, C)     in: gradient of c from the next step; out: gradient of c_prev
 *   grad_gates (B, 2n + 4nC) out: gradient of the gate logits [master input | master forget | o | cand | i | f]
 */
#include <stddef.h>

#ifndef REAL
#define REAL float
#endif
typedef REAL real;

void backward_step(int batch, int n, int chunk, const real *restrict acts, const real *restrict c_prev,
                   const real *restrict probs, const real *restrict grad_dist, const real *restrict grad_h,
                   const real *restrict dh_next, real *restrict dc, real *restrict grad_gates)
{
    const int hidden = n * chunk, gates = 4 * hidden + 2 * n;
    real m_in[n], m_forget[n], d_in[n], d_forget[n];
    real w_unit[hidden], dc_cand[hidden], dc_prev[hidden], dc_w[hidden];
    for (int b = 0; b < batch; b++) {
        const real *o = acts + (size_t)b * 7 * hidden, *cand = o + hidden, *in = cand + hidden, *forget = in + hidden;
        const real *in_hat = forget + hidden, *forget_hat = in_hat + hidden, *tanh_c = forget_hat + hidden;
        const real *cp = c_prev + (size_t)b * hidden, *gh = grad_h + (size_t)b * hidden;
        const real *dn = dh_next + (size_t)b * hidden, *p_in = probs + (size_t)b * 2 * n, *p_forget = p_in + n;
        real *d = dc + (size_t)b * hidden, *out = grad_gates + (size_t)b * gates;
        real *d_o = out + 2 * n, *d_cand = d_o + hidden, *d_i = d_cand + hidden, *d_f = d_i + hidden;

        /* master gates i~ = 1 - cumax, f~ = cumax (eqs. 8-9), and the overlap w = i~ f~ per unit */
        double cum_in = 0.0, cum_forget = 0.0;
        for (int j = 0; j < n; j++) {
            cum_in += p_in[j];
            cum_forget += p_forget[j];
            m_in[j] = (real)(1.0 - cum_in);
            m_forget[j] = (real)cum_forget;
            for (int k = 0; k < chunk; k++)
                w_unit[j * chunk + k] = m_in[j] * m_forget[j];
        }
        /* element-wise gradients of the gate logits, and the carry of dc */
        for (int u = 0; u < hidden; u++) {
            const real dh = gh[u] + dn[u];
            const real dcu = d[u] + dh * o[u] * (1 - tanh_c[u] * tanh_c[u]);
            d_o[u] = dh * tanh_c[u] * o[u] * (1 - o[u]);
            d_cand[u] = dcu * in_hat[u] * (1 - cand[u] * cand[u]);
            d_i[u] = dcu * cand[u] * w_unit[u] * in[u] * (1 - in[u]);
            d_f[u] = dcu * cp[u] * w_unit[u] * forget[u] * (1 - forget[u]);
            dc_cand[u] = dcu * cand[u];
            dc_prev[u] = dcu * cp[u];
            dc_w[u] = dcu * (cp[u] * (forget[u] - 1) + cand[u] * (in[u] - 1)); /* dc/dw */
            d[u] = dcu * forget_hat[u];
        }
        /* per level: gradients of i~ and f~, including the distances (mean i~, 1 - mean f~) */
        for (int j = 0; j < n; j++) {
            real s_cand = 0, s_prev = 0, s_w = 0;
            for (int k = 0; k < chunk; k++) {
                s_cand += dc_cand[j * chunk + k];
                s_prev += dc_prev[j * chunk + k];
                s_w += dc_w[j * chunk + k];
            }
            d_in[j] = s_cand + s_w * m_forget[j] + grad_dist[2 * b] / n;
            d_forget[j] = s_prev + s_w * m_in[j] - grad_dist[2 * b + 1] / n;
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
    }
}

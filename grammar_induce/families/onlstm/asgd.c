/* Averaged SGD's update of one weight in one pass (families/onlstm/asgd.py): torch.optim.ASGD's maths, element by element.
 *
 * grad, where grad_scale is not 0, is divided by it and written back (a clipping scale, as fused SGD takes it); then
 * g = grad + weight_decay * param, param = param * decay + step_size * g (decay = 1 - lambd * eta, step_size = -eta),
 * and the average moves to the new param by mu (copied where mu is 1). runtime/native.py compiles it on first use,
 * with OpenMP where the compiler has it.
 */

void asgd_update(long count, float *param, float *grad, float *average, float weight_decay, float decay,
                 float step_size, float mu, float grad_scale)
{
#pragma omp parallel for schedule(static) if (count >= 65536)
    for (long i = 0; i < count; i++) {
        float g = grad[i];
        if (grad_scale != 0) {
            g /= grad_scale;
            grad[i] = g;
        }
        g += weight_decay * param[i];
        const float p = param[i] * decay + step_size * g;
        param[i] = p;
        average[i] = mu != 1 ? average[i] + (p - average[i]) * mu : p;
    }
}

/* The student's span scores when parsing, in one pass over the spans the CKY reads (i < j), on the CPU.
 *
 * score[b][i][j] = bias + sum_h w[h] relu(columns[b][j][h] - rows[b][i][h]), with rows = g (the projected forward
 * minus backward states at each fencepost) and columns = g + the projection's bias: model.py's _scores without the
 * (B, N+1, N+1, H) features it materialises. Scores of i >= j are left as they are (zeros). runtime/native.py
 * compiles this on first use, with OpenMP where the compiler has it. Arrays are contiguous, row-major:
 *
 *   rows, columns  (batch, posts, hidden)  float
 *   weight         (hidden)                float: the scoring layer
 *   scores         (batch, posts, posts)   float
 */
void span_scores(int batch, int posts, int hidden, const float *rows, const float *columns, const float *weight,
                 float bias, float *scores)
{
#pragma omp parallel for collapse(2) schedule(dynamic, 4) if ((long)batch * posts * posts * hidden >= 1000000)
    for (int b = 0; b < batch; b++) {
        for (int i = 0; i < posts; i++) {
            const float *row = rows + ((long)b * posts + i) * hidden;
            float *out = scores + ((long)b * posts + i) * posts;
            for (int j = i + 1; j < posts; j++) {
                const float *column = columns + ((long)b * posts + j) * hidden;
                float sum = 0.0f;
                for (int h = 0; h < hidden; h++) {
                    const float v = column[h] - row[h];
                    sum += weight[h] * (v > 0.0f ? v : 0.0f);
                }
                out[j] = sum + bias;
            }
        }
    }
}

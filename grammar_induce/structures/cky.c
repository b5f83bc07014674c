/* CKY over a batch of span-score charts: each span's best split, the leftmost of equal bests.
 *
 * The same maths as cky._best_splits_by_tensor_ops (which runs where this cannot be built), in one pass
 * per sentence instead of a dozen tensor ops per span width. runtime/native.py compiles it on first use.
 *
 *   scores  (batch, n + 1, columns)  scores[b][i][j]: the score of the span i..j-1 (columns >= n + 1)
 *   first   (n - 1, batch, n)        out: first[w - 2][b][i] = d - 1 where the best split of i..i+w is at i + d
 *   inside  ((n + 1) * (n + 1))      work space: the best total inside each span, by width then start
 */
void best_splits(int batch, int n, int columns, const double *scores, int *first, double *inside)
{
    for (int b = 0; b < batch; b++) {
        const double *chart = scores + (long)b * (n + 1) * columns;
        for (int i = 0; i < n; i++)
            inside[(n + 1) + i] = 0.0;  /* a single word scores nothing */
        for (int w = 2; w <= n; w++) {
            for (int i = 0; i + w <= n; i++) {
                /* start from the first candidate, not -INFINITY: -ffast-math assumes no infinities */
                double best = inside[(n + 1) + i] + inside[(w - 1) * (n + 1) + i + 1];
                int split = 1;
                for (int d = 2; d < w; d++) {
                    double v = inside[d * (n + 1) + i] + inside[(w - d) * (n + 1) + i + d];
                    if (v > best) {  /* strict: the first of equal bests stays */
                        best = v;
                        split = d;
                    }
                }
                first[((long)(w - 2) * batch + b) * n + i] = split - 1;
                inside[w * (n + 1) + i] = best + chart[i * columns + i + w];
            }
        }
    }
}

/* Each sentence's best tree read from `first` (best_splits's table) in postorder, for trees.tree_of_postorder: a
 * word's position for each word, -1 where the last two parts built join; sentence b (of lengths[b] >= 1 words)
 * gets its 2 lengths[b] - 1 entries from out + offsets[b]. Building the tree in Python from this is a few times
 * faster than reading the table span by span. stack: work space of 3 * (2n + 1) ints. */
void postorders(int batch, int n, const int *first, const int *lengths, const long *offsets, int *out, int *stack)
{
    for (int b = 0; b < batch; b++) {
        int *o = out + offsets[b], top = 0;
        stack[0] = 0, stack[1] = lengths[b], stack[2] = 0, top = 1; /* (i, j, whether its parts are built) */
        while (top > 0) {
            top--;
            const int i = stack[3 * top], j = stack[3 * top + 1];
            if (stack[3 * top + 2]) {
                *o++ = -1;
            } else if (j - i == 1) {
                *o++ = i;
            } else {
                const int k = i + 1 + first[((long)(j - i - 2) * batch + b) * n + i];
                const int todo[9] = {i, j, 1, k, j, 0, i, k, 0}; /* the join last, the left part first */
                for (int t = 0; t < 9; t++)
                    stack[3 * top + t] = todo[t];
                top += 3;
            }
        }
    }
}

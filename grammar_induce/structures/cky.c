/* CKY over a batch of span-score charts: each span's best split, the leftmost of equal bests.
 *
 * The same maths as cky._best_splits_by_tensor_ops (which runs where this cannot be built), in one pass
 * per sentence instead of a dozen tensor ops per span width. runtime/native.py compiles it on first use.
 *
 *   scores  (batch, n + 1, columns)  scores[b][i][j]: the score of the span i..j-1 (columns >= n + 1)
 *   first   (n - 1, batch, n)        out: first[w - 2][b][i] = d - 1 where the best split of i..i+w is at i + d
 *   inside  ((n + 1) * (n + 1))      work space: the best total inside each span, by width then start
 */
#include <math.h>

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

/* The spans of two or more words of each sentence's best tree (best_splits' table `first`, as postorders reads it),
 * marked 1 in out: (batch, n+1, n+1) bytes, zeroed by the caller, out[b, i, j] for the span of words i..j-1. What a
 * pruner keeps of its tree, without the tree. stack: work space of 2 (n + 1) ints. */
void best_spans(int batch, int n, const int *first, const int *lengths, unsigned char *out, int *stack)
{
    for (int b = 0; b < batch; b++) {
        if (lengths[b] < 2)
            continue;
        unsigned char *o = out + (long)b * (n + 1) * (n + 1);
        int top = 1;
        stack[0] = 0, stack[1] = lengths[b]; /* (i, j): a span of two or more words still to mark */
        while (top > 0) {
            top--;
            const int i = stack[2 * top], j = stack[2 * top + 1];
            const int k = i + 1 + first[((long)(j - i - 2) * batch + b) * n + i];
            o[(long)i * (n + 1) + j] = 1;
            if (k - i >= 2)
                stack[2 * top] = i, stack[2 * top + 1] = k, top++;
            if (j - k >= 2)
                stack[2 * top] = k, stack[2 * top + 1] = j, top++;
        }
    }
}

/* The log-sum-exp of `count` values v(t) = a[t * sa] + b[t * sb] + c[t * sc], the largest taken out first (two passes:
 * -ffast-math assumes no infinities, so no running maximum starts at -INFINITY). */
static double sum_of_three(int count, const double *a, long sa, const double *b, long sb, const double *c, long sc)
{
    double top = a[0] + b[0] + c[0];
    for (int t = 1; t < count; t++) {
        const double v = a[t * sa] + b[t * sb] + c[t * sc];
        top = v > top ? v : top;
    }
    double sum = 0.0;
    for (int t = 0; t < count; t++)
        sum += exp(a[t * sa] + b[t * sb] + c[t * sc] - top);
    return top + log(sum);
}

/* The span CRF's marginals (tree_crf.TreeCRF.marginals: the gradient of log Z, the same maths as its autograd of the
 * inside pass): each sentence's inside pass and its outside pass written out, in log space, one pass per sentence.
 *
 *   lengths (batch)                   each sentence's words
 *   scores  (batch, n + 1, columns)   as for best_splits (only spans of two or more words are read)
 *   out     (batch, n + 1, columns)   zeros in; out[b][i][j]: the probability that the span i..j-1 is in the tree
 *   work    (2 (n + 1) (n + 1))       the inside totals (the span's own score in) and the outside ones (not in),
 *                                     each by width then start */
void span_marginals(int batch, int n, int columns, const int *lengths, const double *scores, double *out,
                    double *work)
{
    const long row = n + 1;
    double *inside = work, *outside = work + row * row;
    const double zero = 0.0;
    for (int b = 0; b < batch; b++) {
        const int m = lengths[b];
        const double *chart = scores + (long)b * row * columns;
        double *o = out + (long)b * row * columns;
        if (m < 2)
            continue;
        for (int i = 0; i < m; i++)
            inside[row + i] = 0.0;
        for (int w = 2; w <= m; w++)  /* split at i + d: left i..i+d (width d), right i+d..i+w (width w - d) */
            for (int i = 0; i + w <= m; i++)
                inside[w * row + i] = chart[i * columns + i + w]
                    + sum_of_three(w - 1, &inside[row + i], row, &inside[(w - 1) * row + i + 1], 1 - row, &zero, 0);
        const double log_z = inside[m * row];
        outside[m * row] = 0.0;
        for (int w = m - 1; w >= 2; w--)
            for (int i = 0; i + w <= m; i++) {
                const int k = i + w;
                /* parents i..j (j > k), the sibling k..j on the right; parents h..k (h < i), the sibling h..i on the
                 * left: each parent's outside and own score, and the sibling's inside */
                double parts[2];
                int count = 0;
                if (k < m)
                    parts[count++] = sum_of_three(m - k, &outside[(w + 1) * row + i], row,
                                                  &chart[i * columns + k + 1], 1, &inside[row + k], row);
                if (i > 0)
                    parts[count++] = sum_of_three(i, &outside[k * row], 1 - row, &chart[k], columns,
                                                  &inside[i * row], 1 - row);
                outside[w * row + i] = count == 1 ? parts[0]
                    : fmax(parts[0], parts[1]) + log1p(exp(-fabs(parts[0] - parts[1])));
            }
        for (int w = 2; w <= m; w++)
            for (int i = 0; i + w <= m; i++)
                o[i * columns + i + w] = exp(outside[w * row + i] + inside[w * row + i] - log_z);
    }
}

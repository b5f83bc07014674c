/* A matrix's transpose copied in tiles, split over threads (runtime/products.py lays out a transposed weight from it).
 *
 * torch copies a transposed 2-D view element by element on one thread (16-17 ms for the 1,150 x 4,830 bfloat16 weight
 * of a layer, every batch, on a 2-core Intel Xeon with AMX); tiles that stay in the cache, on both cores, take 8-9 ms.
 * runtime/native.py compiles this on first use, with OpenMP where the compiler has it. `source` is (rows, cols)
 * row-major and `target` (cols, rows).
 */
#include <stdint.h>

enum { TILE = 64 };

#define TRANSPOSE(name, type)                                                                                          \
    void name(long rows, long cols, const type *source, type *target)                                                  \
    {                                                                                                                  \
        _Pragma("omp parallel for schedule(static) if (rows * cols >= 65536)")                                         \
        for (long r0 = 0; r0 < rows; r0 += TILE)                                                                       \
            for (long c0 = 0; c0 < cols; c0 += TILE) {                                                                 \
                const long r1 = r0 + TILE < rows ? r0 + TILE : rows, c1 = c0 + TILE < cols ? c0 + TILE : cols;         \
                for (long c = c0; c < c1; c++)                                                                         \
                    for (long r = r0; r < r1; r++)                                                                     \
                        target[c * rows + r] = source[r * cols + c];                                                   \
            }                                                                                                          \
    }

TRANSPOSE(transpose16, uint16_t)
TRANSPOSE(transpose32, uint32_t)

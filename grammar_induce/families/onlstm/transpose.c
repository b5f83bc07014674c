/* A matrix's transpose copied in strips of rows, split over threads (families/onlstm/products.py lays out a transposed weight
 * from it, and copies the gate gradients so).
 *
 * torch copies a transposed 2-D view element by element on one thread (16-17 ms for the 1,150 x 4,830 bfloat16 weight
 * of a layer, every batch, on a 2-core Intel Xeon with AMX). Here a strip of STRIP rows is read a few columns at a
 * time (as many sequential streams), each 8 x 8 (16-bit) or 4 x 4 (32-bit) block transposed in registers with SSE2,
 * so that a strip writes two whole cache lines of each target row: on that machine, in bfloat16, 4.8-5.7 against
 * 8.8-9.1 ms for the weight, 6.0-6.1 against 11.0 ms for the 1,400 x 4,830 gate gradients, than tiles of 64 x 64
 * copied element by element (medians of 30 alternated, two runs; in float32 about even for the weight).
 * The same strips convert float32 to bfloat16 or back on the way (a weight laid out for bfloat16 products from its
 * float32 master, a bfloat16 gradient back: one pass where a conversion and a copy were two).
 * runtime/native.py compiles this on first use, with OpenMP where the compiler has it. `source` is (rows, cols)
 * row-major and `target` (cols, rows).
 */
#include <stdint.h>

#if defined(__SSE2__)
#include <emmintrin.h>

#define LOAD(p) _mm_loadu_si128((const __m128i *)(p))
#define STORE(p, v) _mm_storeu_si128((__m128i *)(p), v)

/* 8 x 8 16-bit elements: rows of `source` (stride s) to rows of `target` (stride t), in registers. */
static inline void block16(const uint16_t *source, long s, uint16_t *target, long t)
{
    __m128i r[8], a[8], b[8];
    for (int k = 0; k < 8; k++)
        r[k] = LOAD(source + k * s);
    for (int k = 0; k < 4; k++) { /* pairs of rows interleaved */
        a[2 * k] = _mm_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
        a[2 * k + 1] = _mm_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
    }
    for (int h = 0; h < 2; h++) /* then pairs of pairs */
        for (int j = 0; j < 2; j++) {
            b[4 * h + 2 * j] = _mm_unpacklo_epi32(a[4 * h + j], a[4 * h + j + 2]);
            b[4 * h + 2 * j + 1] = _mm_unpackhi_epi32(a[4 * h + j], a[4 * h + j + 2]);
        }
    for (int k = 0; k < 4; k++) { /* and the two halves */
        STORE(target + 2 * k * t, _mm_unpacklo_epi64(b[k], b[k + 4]));
        STORE(target + (2 * k + 1) * t, _mm_unpackhi_epi64(b[k], b[k + 4]));
    }
}

/* 4 x 4 32-bit elements, in registers. */
static inline void block32(const uint32_t *source, long s, uint32_t *target, long t)
{
    __m128i r[4], a[4];
    for (int k = 0; k < 4; k++)
        r[k] = LOAD(source + k * s);
    for (int k = 0; k < 2; k++) {
        a[2 * k] = _mm_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        a[2 * k + 1] = _mm_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; k++) {
        STORE(target + 2 * k * t, _mm_unpacklo_epi64(a[k], a[k + 2]));
        STORE(target + (2 * k + 1) * t, _mm_unpackhi_epi64(a[k], a[k + 2]));
    }
}
#define BLOCK16 8
#define BLOCK32 4
#else /* one element at a time */
#define BLOCK16 1
#define BLOCK32 1
static inline void block16(const uint16_t *source, long s, uint16_t *target, long t)
{
    (void)s, (void)t;
    *target = *source;
}
static inline void block32(const uint32_t *source, long s, uint32_t *target, long t)
{
    (void)s, (void)t;
    *target = *source;
}
#endif

/* float32 <-> bfloat16 by blocks of 8 x 8: converted into (or from) a block in registers' reach, transposed as above.
 * Rounded to nearest even as torch rounds (a NaN stays a NaN), so the numbers are those of `.to(torch.bfloat16)`. */
static inline uint16_t to_bf16(uint32_t bits)
{
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x40u);
    return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static inline void block_to_bf16(const uint32_t *source, long s, uint16_t *target, long t)
{
    uint16_t converted[BLOCK16 * BLOCK16];
    for (int k = 0; k < BLOCK16; k++)
        for (int j = 0; j < BLOCK16; j++)
            converted[k * BLOCK16 + j] = to_bf16(source[k * s + j]);
    block16(converted, BLOCK16, target, t);
}

static inline void block_from_bf16(const uint16_t *source, long s, uint32_t *target, long t)
{
    uint16_t transposed[BLOCK16 * BLOCK16];
    block16(source, s, transposed, BLOCK16);
    for (int k = 0; k < BLOCK16; k++)
        for (int j = 0; j < BLOCK16; j++)
            target[k * t + j] = (uint32_t)transposed[k * BLOCK16 + j] << 16;
}

#define SAME(x) (x)
#define TO_BF16(x) to_bf16(x)
#define FROM_BF16(x) ((uint32_t)(x) << 16)

/* a strip's rows: 128 bytes (two cache lines) of each target row a strip; `convert` for the edges' entries */
#define TRANSPOSE(name, source_type, target_type, block, B, convert)                                                   \
    void name(long rows, long cols, const source_type *source, target_type *target)                                    \
    {                                                                                                                  \
        const long STRIP = 128 / sizeof(target_type), strips = (rows + STRIP - 1) / STRIP, cb = cols / B * B;          \
        _Pragma("omp parallel for schedule(static) if (rows * cols >= 65536)")                                         \
        for (long k = 0; k < strips; k++) {                                                                            \
            const long r0 = k * STRIP, r1 = r0 + STRIP < rows ? r0 + STRIP : rows, rb = r0 + (r1 - r0) / B * B;        \
            for (long c = 0; c < cb; c += B)                                                                           \
                for (long r = r0; r < rb; r += B)                                                                      \
                    block(source + r * cols + c, cols, target + c * rows + r, rows);                                   \
            for (long r = r0; r < r1; r++) /* the edges: the last columns, and the strip's last rows */                \
                for (long c = r < rb ? cb : 0; c < cols; c++)                                                          \
                    target[c * rows + r] = convert(source[r * cols + c]);                                              \
        }                                                                                                              \
    }

TRANSPOSE(transpose16, uint16_t, uint16_t, block16, BLOCK16, SAME)
TRANSPOSE(transpose32, uint32_t, uint32_t, block32, BLOCK32, SAME)
TRANSPOSE(transpose_to_bf16, uint32_t, uint16_t, block_to_bf16, BLOCK16, TO_BF16)
TRANSPOSE(transpose_from_bf16, uint16_t, uint32_t, block_from_bf16, BLOCK16, FROM_BF16)

/* The max-pooling kernels of pooling.c for one element type T and winner type W_T, included
 * once per pair with T, W_T and SUFFIX defined (a template, without the backslashes of a
 * macro). Every kernel here does one plane; pooling.c's drivers pick one and run it over a
 * thread's planes. A forward plane is the padded image (H, W here are its sizes); a backward
 * plane is the unpadded gradient, and the kernels add the padding back where they need it. */
#define NAME_(a, b) a##_##b
#define NAME(a, b) NAME_(a, b)

/* One tap over a run of outputs: where x wins (greater, or NaN), it becomes the maximum and
 * `tap` the winner. Winners are int32 here (one element width with the floats, so the loop
 * vectorizes) and narrowed when stored. The read is strided by `step`: constant 1 and 2 get
 * their own loops (contiguous, or pairs de-interleaved), others a gather. */
static inline void NAME(tap, SUFFIX)(const T *restrict start, Py_ssize_t step,
                                     Py_ssize_t count, int32_t tap, T *restrict best,
                                     int32_t *restrict won)
{
#define WIN(v, o)                                   \
    const int wins = (v > best[o]) | (v != v);      \
    best[o] = wins ? v : best[o];                   \
    won[o] = wins ? tap : won[o];
    if (step == 2) {
#pragma omp simd
        for (Py_ssize_t o = 0; o < count; o++) { const T v = start[2 * o]; WIN(v, o) }
    } else if (step == 1) {
#pragma omp simd
        for (Py_ssize_t o = 0; o < count; o++) { const T v = start[o]; WIN(v, o) }
    } else {
#pragma omp simd
        for (Py_ssize_t o = 0; o < count; o++) { const T v = start[o * step]; WIN(v, o) }
    }
#undef WIN
}

/* All taps of a run, the first one copied. */
static inline void NAME(taps, SUFFIX)(const T *restrict run, Py_ssize_t W, Py_ssize_t step,
                                      Py_ssize_t count, const Geometry *z, T *restrict best,
                                      int32_t *restrict won)
{
    int32_t tap = 0;
    for (Py_ssize_t a = 0; a < z->kh; a++)
        for (Py_ssize_t b = 0; b < z->kw; b++, tap++) {
            const T *start = run + a * z->dh * W + b * z->dw;
            if (tap == 0) {
                for (Py_ssize_t o = 0; o < count; o++) {
                    best[o] = start[o * step];
                    won[o] = 0;
                }
            } else {
                NAME(tap, SUFFIX)(start, step, count, tap, best, won);
            }
        }
}

/* 2x2 windows at stride 2 (the usual pooling), all four taps in one vectorized loop. Winners
 * are made as int32 (the floats' element width) in a row buffer and narrowed after: a loop
 * that stores int8 directly vectorizes 64 outputs at a time, and rows are often 16 long. */
static void NAME(forward_2x2, SUFFIX)(const T *restrict x, T *restrict y,
                                      W_T *restrict winners, const Geometry *z)
{
    const Py_ssize_t W = z->W, OH = z->OH, OW = z->OW;  /* no reloads in the loop */
    int32_t won[ROW_CHUNK];
    for (Py_ssize_t oh = 0; oh < OH; oh++)
        for (Py_ssize_t o0 = 0; o0 < OW; o0 += ROW_CHUNK) {
            const Py_ssize_t count = OW - o0 < ROW_CHUNK ? OW - o0 : ROW_CHUNK;
            const T *restrict r0 = x + 2 * oh * W + 2 * o0, *restrict r1 = r0 + W;
            T *restrict out = y + oh * OW + o0;
#pragma omp simd
            for (Py_ssize_t o = 0; o < count; o++) {
                const T v0 = r0[2 * o], v1 = r0[2 * o + 1], v2 = r1[2 * o], v3 = r1[2 * o + 1];
                T best = v0;
                int32_t w = 0;
                int wins = (v1 > best) | (v1 != v1);
                best = wins ? v1 : best; w = wins ? 1 : w;
                wins = (v2 > best) | (v2 != v2);
                best = wins ? v2 : best; w = wins ? 2 : w;
                wins = (v3 > best) | (v3 != v3);
                best = wins ? v3 : best; w = wins ? 3 : w;
                out[o] = best;
                won[o] = w;
            }
            W_T *restrict out_won = winners + oh * OW + o0;
            for (Py_ssize_t o = 0; o < count; o++) out_won[o] = (W_T)won[o];
        }
}

/* Windows whose strides are equal, over rows short enough (FLAT_CHUNK): several output rows
 * taken as one run over the plane read flat. Output (oh, ow) sits at q = oh * W + ow of a run
 * whose rows are W long, and its tap (a, b) reads x[s * q + a * dh * W + b * dw]: one long
 * vector loop per tap instead of one per row and tap (GoogLeNet's 3x3 windows over 7- and
 * 14-pixel rows spent most of their time entering loops). The columns past OW are computed
 * and dropped; they read inside the plane (s * q < s * (oh + 1) * W). */
static void NAME(forward_flat, SUFFIX)(const T *restrict x, T *restrict y,
                                       W_T *restrict winners, const Geometry *z)
{
    const Py_ssize_t W = z->W, OH = z->OH, OW = z->OW, s = z->sw;
    const Py_ssize_t rows = FLAT_CHUNK / W;
    T best[FLAT_CHUNK];
    int32_t won[FLAT_CHUNK];
    for (Py_ssize_t oh0 = 0; oh0 < OH; oh0 += rows) {
        const Py_ssize_t n = OH - oh0 < rows ? OH - oh0 : rows, count = (n - 1) * W + OW;
        NAME(taps, SUFFIX)(x + s * oh0 * W, W, s, count, z, best, won);
        for (Py_ssize_t r = 0; r < n; r++) {
            T *out = y + (oh0 + r) * OW;
            W_T *out_won = winners + (oh0 + r) * OW;
            for (Py_ssize_t o = 0; o < OW; o++) {
                out[o] = best[r * W + o];
                out_won[o] = (W_T)won[r * W + o];
            }
        }
    }
}

/* Any other windows: each output row's maxima and winners kept in cache while the taps pass
 * over it (a tap is a strided read of one input row). */
static void NAME(forward_rows, SUFFIX)(const T *restrict x, T *restrict y,
                                       W_T *restrict winners, const Geometry *z)
{
    T best[ROW_CHUNK];
    int32_t won[ROW_CHUNK];
    for (Py_ssize_t oh = 0; oh < z->OH; oh++)
        for (Py_ssize_t o0 = 0; o0 < z->OW; o0 += ROW_CHUNK) {
            const Py_ssize_t count = z->OW - o0 < ROW_CHUNK ? z->OW - o0 : ROW_CHUNK;
            NAME(taps, SUFFIX)(x + oh * z->sh * z->W + o0 * z->sw, z->W, z->sw, count, z,
                               best, won);
            T *out = y + oh * z->OW + o0;
            W_T *out_won = winners + oh * z->OW + o0;
            for (Py_ssize_t o = 0; o < count; o++) {
                out[o] = best[o];
                out_won[o] = (W_T)won[o];
            }
        }
}

/* The gradient of 2x2 windows at stride 2 that tile the image: each input row's pixel j gets
 * its window's gradient where its window's winner is its tap, else 0. The window's gradient
 * and winner are first spread over the two pixels of each (a short scalar loop), so that the
 * writes are one contiguous vector loop per input row (written as stride-2 stores, they did
 * not vectorize). */
static void NAME(backward_2x2, SUFFIX)(const T *restrict g, const W_T *restrict winners,
                                       T *restrict dx, const Geometry *z, const Taps *taps)
{
    const Py_ssize_t W = z->W, OH = z->OH, OW = z->OW;
    T spread[2 * ROW_CHUNK];
    int32_t won[2 * ROW_CHUNK];
    for (Py_ssize_t oh = 0; oh < OH; oh++)
        for (Py_ssize_t o0 = 0; o0 < OW; o0 += ROW_CHUNK) {
            const Py_ssize_t count = OW - o0 < ROW_CHUNK ? OW - o0 : ROW_CHUNK;
            const T *restrict gr = g + oh * OW + o0;
            const W_T *restrict wr = winners + oh * OW + o0;
            for (Py_ssize_t o = 0; o < count; o++) {
                spread[2 * o] = spread[2 * o + 1] = gr[o];
                won[2 * o] = won[2 * o + 1] = wr[o];
            }
            T *restrict r0 = dx + 2 * oh * W + 2 * o0, *restrict r1 = r0 + W;
#pragma omp simd
            for (Py_ssize_t j = 0; j < 2 * count; j++) {
                const int32_t tap = (int32_t)(j & 1);
                r0[j] = won[j] == tap ? spread[j] : (T)0;
                r1[j] = won[j] == tap + 2 ? spread[j] : (T)0;
            }
        }
}

/* Any other windows: the plane zeroed, then each window's gradient added into the pixel its
 * winner names (the tap's offsets from a table: no division per pixel). Windows are taken
 * last to first, so a pixel that several windows pick sums their gradients in the order of
 * its tap in each (a later window holds it at an earlier tap): the NumPy kernel's order, and
 * the GPU's, to the bit. */
static void NAME(backward_any, SUFFIX)(const T *restrict g, const W_T *restrict winners,
                                       T *restrict d, const Geometry *z, const Taps *taps)
{
    const Py_ssize_t H = z->H, W = z->W, OH = z->OH, OW = z->OW;
    const Py_ssize_t *rows = taps->rows, *cols = taps->cols;
    memset(d, 0, (size_t)(H * W) * sizeof(T));
    for (Py_ssize_t oh = OH - 1; oh >= 0; oh--) {
        const Py_ssize_t top = oh * z->sh - z->ph;
        for (Py_ssize_t ow = OW - 1; ow >= 0; ow--) {
            const Py_ssize_t t = (Py_ssize_t)winners[oh * OW + ow];
            const Py_ssize_t ih = top + rows[t], iw = ow * z->sw - z->pw + cols[t];
            if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                d[ih * W + iw] += g[oh * OW + ow];
        }
    }
}

/* The forward over images [n0, n1) on `threads` of OpenMP's team (or this thread alone):
 * each plane read where it lies (channel-major or not), copied into a thread's own padded
 * plane (its -inf border set once) where the window is padded. 0 where that plane could
 * not be allocated. */
static int NAME(forward, SUFFIX)(const T *x, T *y, W_T *winners, const Geometry *z,
                                 int threads)
{
    Geometry plane = *z;  /* the kernels' view: the padded plane */
    plane.H = z->H + 2 * z->ph;
    plane.W = z->W + 2 * z->pw;
    void (*kernel)(const T *, T *, W_T *, const Geometry *) =
        z->kh == 2 && z->kw == 2 && z->sh == 2 && z->sw == 2 && z->dh == 1 && z->dw == 1
            ? NAME(forward_2x2, SUFFIX)
        : z->sh == z->sw && plane.W <= FLAT_CHUNK && (z->sw == 1 || z->OW < FLAT_ROW)
            ? NAME(forward_flat, SUFFIX)
            : NAME(forward_rows, SUFFIX);
    const Py_ssize_t area = z->H * z->W, out_area = z->OH * z->OW;
    const int pads = z->ph || z->pw;
    int failed = 0;
#pragma omp parallel num_threads(threads) if(threads > 1)
    {
        T *padded = pads ? malloc((size_t)(plane.H * plane.W) * sizeof(T)) : NULL;
        if (pads && padded == NULL) {
#pragma omp atomic write
            failed = 1;
        } else if (padded != NULL) {
            for (Py_ssize_t i = 0; i < plane.H * plane.W; i++) padded[i] = -(T)INFINITY;
        }
#pragma omp for schedule(static)
        for (Py_ssize_t p = z->n0 * z->C; p < z->n1 * z->C; p++) {
            if (pads && padded == NULL)
                continue;
            const Py_ssize_t n = p / z->C, c = p % z->C;
            const T *source = x + plane_index(z, n, c) * area;
            if (padded != NULL) {
                for (Py_ssize_t h = 0; h < z->H; h++)
                    memcpy(padded + (h + z->ph) * plane.W + z->pw, source + h * z->W,
                           (size_t)z->W * sizeof(T));
                source = padded;
            }
            kernel(source, y + p * out_area, winners + p * out_area, &plane);
        }
        free(padded);
    }
    return !failed;
}

/* The gradient over images [n0, n1) on `threads` of OpenMP's team (or this thread alone);
 * g read where it lies, winners and dx C-contiguous. */
static void NAME(backward, SUFFIX)(const T *g, const W_T *winners, T *dx, const Geometry *z,
                                   const Taps *taps, int threads)
{
    void (*kernel)(const T *, const W_T *, T *, const Geometry *, const Taps *) =
        taps == NULL ? NAME(backward_2x2, SUFFIX) : NAME(backward_any, SUFFIX);
    const Py_ssize_t area = z->H * z->W, out_area = z->OH * z->OW;
#pragma omp parallel for num_threads(threads) if(threads > 1) schedule(static)
    for (Py_ssize_t p = z->n0 * z->C; p < z->n1 * z->C; p++)
        kernel(g + plane_index(z, p / z->C, p % z->C) * out_area, winners + p * out_area,
               dx + p * area, z, taps);
}

#undef NAME
#undef NAME_

/* tests/gpu/test_adamw8bit_cuda.c — the CUDA 8-bit AdamW against the CPU reference.
 *
 * The idea: both launchers do the same IEEE fp32 operations in the same order
 * (the CUDA kernel through _rn intrinsics, so nothing becomes an FMA), search
 * the same map the same way and take the same absmax (a max is exact in any
 * order), so after several steps the codes, absmax and fp32 small-tensor state
 * must be identical bytes and the weights identical (checked within 1e-6
 * relative, expected exact). Slices mix 8-bit and fp32 state, with partial last
 * blocks; the compute copy is checked in bf16 and fp16 against the CPU weights
 * rounded to nearest even. The kernel takes a whole piece with aligned memory
 * on 16-byte loads and any other lane by lane: the slices' offsets are chosen
 * so that each dtype's run has whole pieces of both kinds of state both ways
 * (count_layouts says which, and checks it). The backend table's entry is
 * checked too, and one large update is timed. Run on a GPU machine:
 * tests/gpu/run.sh. Blocks follow the rows of kernels/adamw8bit.h (rows of 768:
 * 3 whole blocks; of 192, l124m's o_proj: one partial block each); at step 3
 * some v codes are set to the map's 0 under live m (a vanished second moment,
 * which the rule of issue 52 no longer reaches but the cap still guards), so
 * the capped step (adamw8bit_max_step) runs on both sides and must agree too.
 * Then issue 52's drift bound (drift_case): an embedding of 512 rows of 128,
 * half of them with a gradient every step and half with one gradient each,
 * 150 steps at lr 3e-3 on the same gradients through the CUDA kernel, the CPU
 * 8-bit reference and fp32 AdamW: CUDA equals the CPU bit for bit, no element
 * ever has m != 0 with v decoding to 0, and no element of one gradient moves
 * after it more than 1.5x what fp32 AdamW moves it (tests/test_adamw8bit_drift.c
 * asserts the same on CPU training runs). */
#include "../../kernels/backend.h"
#include "../../common/util.h"
#include "../test.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static Rng rng;

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static uint16_t to_fp16(float f) { _Float16 h = (_Float16)f; uint16_t u; memcpy(&u, &h, 2); return u; }

typedef struct { size_t Q, NB, S, P; } Sizes;

/* state views into one host or device buffer: m32 v32 | m_absmax v_absmax | m_code v_code */
static AdamW8bitState views(char *base, Sizes z) {
    AdamW8bitState st;
    size_t nb = z.NB;
    st.m32 = (float *)base;
    st.v32 = st.m32 + z.S;
    st.m_absmax = st.v32 + z.S;
    st.v_absmax = st.m_absmax + nb;
    st.m_code = (uint8_t *)(st.v_absmax + nb);
    st.v_code = st.m_code + (z.Q + 15) / 16 * 16;   /* on 16 bytes, as the optimizer's 256-byte-aligned views put it */
    return st;
}
static size_t state_bytes(Sizes z) { return 2 * z.S * 4 + 2 * z.NB * 4 + 2 * ((z.Q + 15) / 16 * 16); }
/* appends a slice of count elements in rows of row (0: fp32 state) to z */
static AdamW8bitSlice add_slice(Sizes *z, size_t count, size_t row, float wd) {
    AdamW8bitSlice sl = {z->P, count, 0, 0, row ? row : count, wd, row > 0};
    if (row) {
        sl.state = (z->Q + 15) / 16 * 16;
        sl.block = z->NB;
        z->Q = sl.state + count;
        z->NB += adamw8bit_slice_blocks(&sl);
    } else {
        sl.state = z->S;
        z->S += count;
    }
    z->P += count;
    return sl;
}

/* kernels/cuda/adamw8bit.cu's choice for each whole piece, from the device
 * addresses (never dereferenced): contiguous 16-byte loads where weights,
 * grads, compute copy (esize bytes an element) and fp32 state are 16-byte
 * aligned and codes 8-byte aligned, lane by lane otherwise. n[q][c]: pieces of
 * 8-bit (q = 1) or fp32-state (q = 0) slices, contiguous (c = 1) or not. */
static void count_layouts(const AdamW8bitSlice *sl, int n_slices, const float *dp, const float *dg, const void *dc,
                          size_t esize, AdamW8bitState dst, size_t n[2][2]) {
    memset(n, 0, 4 * sizeof(size_t));
    for (int s = 0; s < n_slices; s++)
        for (size_t b = 0; b < adamw8bit_slice_blocks(&sl[s]); b++) {
            int len;
            size_t j0 = adamw8bit_block_span(&sl[s], b, &len), i = sl[s].offset + j0, q = sl[s].state + j0;
            if (len < ADAMW8BIT_BLOCK) continue;
            uintptr_t a = (uintptr_t)(dp + i) | (uintptr_t)(dg + i) | (dc ? (uintptr_t)((const char *)dc + i * esize) : 0);
            int c = sl[s].quantized ? a % 16 == 0 && ((uintptr_t)(dst.m_code + q) | (uintptr_t)(dst.v_code + q)) % 8 == 0
                                    : a % 16 == 0 && ((uintptr_t)(dst.m32 + q) | (uintptr_t)(dst.v32 + q)) % 16 == 0;
            n[sl[s].quantized][c]++;
        }
}

static void run_case(DType act, const char *name) {
    const Backend *gpu = backend_cuda(act), *cpu = backend_cpu();
    /* slices: 8-bit in rows of 768 with a partial last row, fp32, 8-bit in rows of 192, fp32 tiny, 8-bit large
     * in rows of 2048, fp32. Element offsets 0, 5000, 5300, 9396, 9403, 209416; fp32 state at 0, 300, 307.
     * Contiguous: slice 0's whole blocks; slice 1's first (fp32 state). Lane by lane: slice 2's (blocks of 192),
     * slice 4's (odd offset), slice 5's (m32 + 307), and every partial block. */
    enum { NS = 6 };
    size_t counts[NS] = {5000, 300, 4096, 7, 200000 + 13, 2 * 256 + 5}, rows[NS] = {768, 0, 192, 0, 2048, 0};
    float wd[NS] = {0.1f, 0.0f, 0.05f, 0.0f, 0.1f, 0.02f};
    AdamW8bitSlice sl[NS];
    Sizes z = {0, 0, 0, 0};
    for (int s = 0; s < NS; s++) sl[s] = add_slice(&z, counts[s], rows[s], wd[s]);
    size_t P = z.P, SB = state_bytes(z), esize = act == DTYPE_FP32 ? 4 : 2;
    float *hp = mallocCheck(P * 4), *hg = mallocCheck(P * 4), *gp_back = mallocCheck(P * 4);
    char *hs = callocCheck(SB, 1), *gs_back = mallocCheck(SB);
    uint16_t *gc_back = mallocCheck(P * 2);
    for (size_t i = 0; i < P; i++) hp[i] = rng_normal(&rng) * 0.02f;
    float *dp = gpu->alloc(P * 4, "params"), *dg = gpu->alloc(P * 4, "grads");
    void *dc = act == DTYPE_FP32 ? NULL : gpu->alloc(P * esize, "compute copy");
    char *ds = gpu->alloc(SB, "8-bit state");
    gpu->upload(dp, hp, P * 4);
    AdamW8bitState hst = views(hs, z), dst = views(ds, z);
    size_t lay[2][2];
    count_layouts(sl, NS, dp, dg, dc, esize, dst, lay);
    printf("%s: whole pieces contiguous / lane by lane: 8-bit %zu / %zu, fp32 state %zu / %zu\n", name, lay[1][1], lay[1][0],
           lay[0][1], lay[0][0]);
    CHECK(lay[1][1] && lay[1][0] && lay[0][1] && lay[0][0], "%s: the slices take both layouts of the kernel for both kinds of state",
          name);
    /* vanished v at step 3: elements of a contiguous block (slice 0), a lane-by-lane one (slice 2) and the odd slice 4 */
    size_t holes[3] = {sl[0].offset + 5, sl[2].offset + 200, sl[4].offset + 3000};
    int capped = 0;
    for (int t = 1; t <= 6; t++) {
        for (size_t i = 0; i < P; i++) hg[i] = (rng_normal(&rng) + 0.3f) * 1e-3f * (1 + i % 5);
        if (t == 4) for (size_t i = 0; i < 256; i++) hg[i] = 0;   /* an all-zero m block's update: absmax 0 path next step */
        AdamWHyper h = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.7f, .step = t};
        float before[3];
        if (t == 3) {   /* the same state on both sides, with v codes 0 under live m and no gradient to refill them */
            for (int k = 0; k < 3; k++) {
                const AdamW8bitSlice *s = &sl[k == 0 ? 0 : k == 1 ? 2 : 4];
                hst.v_code[s->state + (holes[k] - s->offset)] = ADAMW8BIT_ZERO;
                hg[holes[k]] = 0;
                before[k] = hp[holes[k]];
            }
            gpu->upload(ds, hs, SB);
        }
        gpu->upload(dg, hg, P * 4);
        cpu->adamw8bit_update(hp, NULL, hg, hst, sl, NS, h);
        adamw8bit_update_cuda(dp, dc, dg, dst, sl, NS, h);
        if (t == 3) {
            float cap = adamw8bit_max_step(h);
            for (int k = 0; k < 3; k++) {
                const AdamW8bitSlice *s = &sl[k == 0 ? 0 : k == 1 ? 2 : 4];
                float step = before[k] * (1.0f - h.lr * s->weight_decay) - hp[holes[k]];
                capped += fabsf(fabsf(step) - cap) <= 1e-3f * cap;
            }
        }
    }
    CHECK(capped == 3, "%s: the vanished-v elements took the capped step on the CPU (%d of 3); the GPU must match", name, capped);
    gpu->synchronize();
    gpu->download(gp_back, dp, P * 4);
    gpu->download(gs_back, ds, SB);
    size_t diff_bytes = 0;
    for (size_t b = 0; b < SB; b++) diff_bytes += hs[b] != gs_back[b];
    double worst = 0;
    size_t unequal = 0;
    for (size_t i = 0; i < P; i++) {
        worst = fmax(worst, fabs((double)hp[i] - gp_back[i]) / fmax(fabs(hp[i]), 1e-30));
        unequal += hp[i] != gp_back[i];
    }
    CHECK(diff_bytes == 0, "%s: %zu of %zu state bytes (codes, absmax, fp32 m/v) differ between CPU and CUDA", name, diff_bytes, SB);
    CHECK(worst <= 1e-6, "%s: weights differ by %.3g relative (%zu elements not identical)", name, worst, unequal);
    if (dc) {
        gpu->download(gc_back, dc, P * 2);
        size_t bad = 0;
        for (size_t i = 0; i < P; i++) bad += gc_back[i] != (act == DTYPE_BF16 ? to_bf16(hp[i]) : to_fp16(hp[i]));
        CHECK(bad == 0, "%s: %zu compute-copy elements are not the rounded fp32 weights", name, bad);
    }
    printf("%s: %zu params, state %zu bytes: %zu bytes differ; weights max rel diff %.3g (%zu not identical)\n", name, P, SB,
           diff_bytes, worst, unequal);
    gpu->free(dp); gpu->free(dg); gpu->free(ds);
    if (dc) gpu->free(dc);
    free(hp); free(hg); free(gp_back); free(hs); free(gs_back); free(gc_back);
}

/* Issue 52's drift bound on the GPU (the header). Gradients span 4 decades within a row, so some elements
 * sit far below their block's largest, where the old v map lost them. */
static void drift_case(void) {
    enum { ROWS = 512, DIM = 128, STEPS = 150, EVERY = 256 };   /* rows EVERY.. get one gradient each */
    const Backend *gpu = backend_cuda(DTYPE_FP32), *cpu = backend_cpu();
    Sizes z = {0, 0, 0, 0};
    AdamW8bitSlice sl = add_slice(&z, (size_t)ROWS * DIM, DIM, 0.1f);
    AdamWSlice fs = {0, z.P, 0.1f};
    size_t P = z.P, SB = state_bytes(z), holes = 0;
    float *hp = mallocCheck(P * 4), *fw = mallocCheck(P * 4), *hg = mallocCheck(P * 4), *m32 = callocCheck(P, 4), *v32 = callocCheck(P, 4);
    float *at8 = mallocCheck(P * 4), *at32 = mallocCheck(P * 4), *back = mallocCheck(P * 4), *dm = mallocCheck(P * 4), *dv = mallocCheck(P * 4);
    char *hs = callocCheck(SB, 1), *gs_back = mallocCheck(SB);
    int once[ROWS];
    for (int r = 0; r < ROWS; r++) once[r] = r < EVERY ? 0 : 1 + (int)(rng_u64(&rng) % (STEPS - 20));
    for (size_t i = 0; i < P; i++) hp[i] = fw[i] = at8[i] = at32[i] = rng_normal(&rng) * 0.02f;
    AdamW8bitState hst = views(hs, z);
    memset(hst.m_code, ADAMW8BIT_ZERO, z.Q);   /* all moments 0 */
    memset(hst.v_code, ADAMW8BIT_ZERO, z.Q);
    float *dp = gpu->alloc(P * 4, "params"), *dg = gpu->alloc(P * 4, "grads");
    char *ds = gpu->alloc(SB, "8-bit state");
    AdamW8bitState dst = views(ds, z), back_st = views(gs_back, z);
    gpu->upload(dp, hp, P * 4);
    gpu->upload(ds, hs, SB);
    for (int t = 1; t <= STEPS; t++) {
        for (int r = 0; r < ROWS; r++)
            for (int k = 0; k < DIM; k++)
                hg[r * DIM + k] = once[r] == 0 || once[r] == t ? rng_normal(&rng) * 1e-2f * powf(10.0f, -4.0f * rng_uniform(&rng)) : 0.0f;
        AdamWHyper h = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1.0f, .step = t};
        gpu->upload(dg, hg, P * 4);
        adamw8bit_update_cuda(dp, NULL, dg, dst, &sl, 1, h);
        cpu->adamw8bit_update(hp, NULL, hg, hst, &sl, 1, h);
        cpu->adamw_update(fw, NULL, hg, m32, v32, &fs, 1, h);
        for (size_t i = 0; i < P; i++) if (hg[i] != 0.0f) { at8[i] = hp[i]; at32[i] = fw[i]; }
        gpu->synchronize();
        gpu->download(gs_back, ds, SB);
        adamw8bit_state_get(back_st, &sl, 1, dm, dv);
        for (size_t i = 0; i < P; i++) holes += dm[i] != 0.0f && dv[i] == 0.0f;
    }
    gpu->download(back, dp, P * 4);
    size_t over = 0, n_once = 0;
    double worst = 0;
    for (int r = EVERY; r < ROWS; r++)
        for (int k = 0; k < DIM; k++) {
            size_t i = (size_t)r * DIM + k;
            double mv = fabs((double)back[i] - at8[i]), ma = fabs((double)fw[i] - at32[i]);
            n_once++;
            over += mv > 1.5 * ma;
            if (ma > 0) worst = fmax(worst, mv / ma);
        }
    CHECK(!memcmp(back, hp, P * 4) && !memcmp(gs_back, hs, SB), "drift case: CUDA weights and state equal the CPU reference's bit for bit");
    CHECK(holes == 0, "drift case: no element has m != 0 with v decoding to 0 (%zu element-steps do)", holes);
    CHECK(over == 0 && n_once > 30000, "drift case: of %zu elements of one gradient %zu move after it more than 1.5x fp32 AdamW's "
          "(worst %.3fx)", n_once, over, worst);
    printf("drift case: %zu elements of one gradient moved after it at most %.3fx fp32 AdamW's; m != 0 with v = 0: %zu\n", n_once,
           worst, holes);
    gpu->free(dp); gpu->free(dg); gpu->free(ds);
    free(hp); free(fw); free(hg); free(m32); free(v32); free(at8); free(at32); free(back); free(dm); free(dv); free(hs); free(gs_back);
}

static void check_table_and_time(void) {
    const Backend *gpu = backend_cuda(DTYPE_BF16);
    CHECK(gpu->adamw8bit_update == adamw8bit_update_cuda, "the CUDA backend table holds adamw8bit_update_cuda");
    size_t P = (size_t)124 << 20;   /* about l124m */
    Sizes z = {0, 0, 0, 0};
    AdamW8bitSlice sl = add_slice(&z, P, 768, 0.1f);   /* rows of 768: l124m's q/k/v, gate/up, embedding */
    float *dp = gpu->alloc(P * 4, "params"), *dg = gpu->alloc(P * 4, "grads");
    void *dc = gpu->alloc(P * 2, "compute copy");
    char *ds = gpu->alloc(state_bytes(z), "8-bit state");
    AdamW8bitState st = views(ds, z);
    AdamWHyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 1.0f, .step = 1};
    adamw8bit_update_cuda(dp, dc, dg, st, &sl, 1, h);
    gpu->synchronize();
    double t0 = now_seconds();
    for (int k = 0; k < 10; k++) { h.step = k + 2; adamw8bit_update_cuda(dp, dc, dg, st, &sl, 1, h); }
    gpu->synchronize();
    double ms = (now_seconds() - t0) / 10 * 1e3, bytes = (double)P * (4 + 4 + 4 + 2 + 2 + 2) + 4.0 * P / 64;
    printf("timing: %zu params, bf16 compute copy: %.3f ms per update, %.0f GB/s\n", P, ms, bytes / ms / 1e6);
    gpu->free(dp); gpu->free(dg); gpu->free(dc); gpu->free(ds);
}

int main(void) {
    rng_seed(&rng, 5);
    run_case(DTYPE_FP32, "fp32");
    run_case(DTYPE_BF16, "bf16");
    run_case(DTYPE_FP16, "fp16");
    drift_case();
    check_table_and_time();
    return test_summary();
}

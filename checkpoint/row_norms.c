/* checkpoint/row_norms.c — `build/train inspect --row_norms=NAME PATH`: the L2 norm of every row of
 * one tensor of a checkpoint, summed up in one line (the largest and its row, the mean, the smallest
 * and its row).
 *
 * The idea: an optimizer that moves the rows it trains least shows there first. A rare token's
 * embedding row gets a gradient once or never; under an 8-bit AdamW whose second moment decodes to 0
 * (issue 52) it kept stepping and its norm grew to the size of the most-trained rows. The largest
 * embedding-row norm of two runs is the one number bench/gpu/q8_quality.sh compares for that. The
 * tensor is read whole through the checkpoint reader (its CRC checked, a NaN refused as every loader
 * refuses it); each row's sum of squares is taken in double. A 1-D tensor is one row. */
#include "cli.h"
#include "checkpoint.h"
#include "format.h"
#include "../common/util.h"
#include <math.h>
#include <stdlib.h>

int checkpoint_row_norms(const char *path, const char *name, FILE *out) {
    char state[1200], err[1600];
    checkpoint_state_path(path, state, sizeof state);
    CkptReader r;
    if (ckpt_open(&r, state, err, sizeof err) != 0) { fprintf(stderr, "error: %s\n", err); return 1; }
    const CkptEntry *e = ckpt_find(&r, name);
    if (!e) {
        fprintf(stderr, "error: inspect --row_norms=%s: '%s' holds no tensor of that name\n"
                        "  hint: `build/train inspect %s` lists its tensors (e.g. model.embed_tokens.weight)\n", name, state, path);
        ckpt_close(&r);
        return 1;
    }
    int64_t rows, cols;
    ckpt_entry_dims(e, &rows, &cols);
    float *w = mallocCheck((size_t)(rows * cols) * sizeof(float) + 1);   /* (rows, cols); one read checks the whole tensor */
    if (ckpt_read_f32(&r, e, 0, rows, 0, cols, w, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        free(w);
        ckpt_close(&r);
        return 1;
    }
    double largest = -1, smallest = INFINITY, sum = 0;
    int64_t at_largest = 0, at_smallest = 0;
    for (int64_t i = 0; i < rows; i++) {
        double ss = 0;
        for (int64_t k = 0; k < cols; k++) ss += (double)w[i * cols + k] * w[i * cols + k];
        double norm = sqrt(ss);
        sum += norm;
        if (norm > largest) { largest = norm; at_largest = i; }
        if (norm < smallest) { smallest = norm; at_smallest = i; }
    }
    fprintf(out, "row norms of %s (%lld x %lld) in %s: largest %.6f (row %lld), mean %.6f, smallest %.6f (row %lld)\n", name,
            (long long)rows, (long long)cols, state, largest, (long long)at_largest, rows ? sum / rows : 0.0, smallest,
            (long long)at_smallest);
    free(w);
    ckpt_close(&r);
    return 0;
}

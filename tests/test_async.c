/* tests/test_async.c — the copies that do not wait for the device, on the CPU
 * backends (fp32 and emulated bf16): queued uploads from a reused buffer all
 * arrive, and the loss a step reads back once equals, bit for bit, the loss
 * each forward read back at once before — under gradient accumulation, a
 * GPipe schedule of 3 slots and more forwards than the model's loss regions
 * (tests/async_check.h; tests/gpu/test_cuda_model.c runs the same on a GPU). */
#include "async_check.h"

int main(void) {
    check_async(backend_cpu());
    check_async(backend_cpu_emulated(DTYPE_BF16));
    return test_summary();
}

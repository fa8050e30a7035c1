/* bench/gpu/racecheck_mbar.cu — does compute-sanitizer's racecheck see the
 * fa3 backward's lse/Dsum hand-off as ordered? (issue 55: the 2026-12-07 run
 * flagged warp 1's stores of a stage's lse/Dsum against the consumers' reads.)
 *
 * The idea: the same protocol, alone, in a kernel that does nothing else. One
 * writer warp fills a stage of 128 floats in shared memory and all its lanes
 * arrive on the stage's "full" mbarrier; eight reader warps wait on it, read
 * the stage, __syncwarp, and (mode 0, as fa3_dkv_kernel does) lane 0 arrives on
 * the stage's "empty" mbarrier (count 8) one item later; mode 1 has every lane
 * arrive (count 256). The writer waits on "empty" before it refills a stage.
 * The protocol is race-free by the PTX memory model in both modes (arrive is a
 * release, try_wait an acquire, __syncwarp orders the lanes), so a hazard
 * racecheck reports in mode 0 and not in mode 1 is the tool's model of the
 * warp-level hand-off, not a race in the kernel; one it reports in both says
 * the tool does not follow mbarrier phases at all here.
 *   build and run (device): nvcc -std=c++17 -arch=sm_90a -I kernels/cuda bench/gpu/racecheck_mbar.cu -o /tmp/rm &&
 *     compute-sanitizer --tool racecheck /tmp/rm 0; compute-sanitizer --tool racecheck /tmp/rm 1
 * The program itself checks every read value (exit 1 on a wrong one). */
#include "tensor_core.cuh"   /* smem_addr */
#include "attention_fa3.cuh"
#include <stdio.h>
#include <stdlib.h>

#define STAGES 4
#define ITEMS 64

__global__ void handoff(int mode, int *bad) {
    __shared__ float LD[STAGES][128];
    __shared__ __align__(8) uint64_t bars[2 * STAGES];   /* full[s], empty[s] */
    uint32_t full = smem_addr(&bars[0]), empty = smem_addr(&bars[STAGES]);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(full + 8 * s, 32);
            mbar_init(empty + 8 * s, mode ? 256 : 8);
        }
        mbar_init_fence();
    }
    __syncthreads();
    if (warp == 0) {   /* the writer: item it into stage it % STAGES once its last readers are done */
        for (int it = 0; it < ITEMS; it++) {
            int s = it % STAGES;
            mbar_wait(empty + 8 * s, ((it / STAGES) & 1) ^ 1);
            for (int e = lane; e < 128; e += 32) LD[s][e] = (float)(it * 1000 + e);
            __syncwarp();
            mbar_arrive(full + 8 * s);
        }
        return;
    }
    int tid = threadIdx.x - 32;   /* 256 readers */
    float sum = 0.0f;
    for (int it = 0; it < ITEMS; it++) {
        int s = it % STAGES;
        mbar_wait(full + 8 * s, (it / STAGES) & 1);
        __syncwarp();
        if (it && (mode || lane == 0)) mbar_arrive(empty + 8 * ((it - 1) % STAGES));   /* done with the previous stage */
        for (int e = 0; e < 16; e++) {   /* each lane reads 16 of the 128, as a consumer reads its columns' lse/Dsum */
            int at = (tid * 7 + e * 8) % 128;
            float v = LD[s][at];
            if (v != (float)(it * 1000 + at)) atomicAdd(bad, 1);
            sum += v;
        }
    }
    if (sum < 0.0f) atomicAdd(bad, 1000000);   /* (keeps the reads) */
}

int main(int argc, char **argv) {
    int mode = argc > 1 ? atoi(argv[1]) : 0, *bad, host = 0;
    cudaMalloc(&bad, sizeof(int));
    cudaMemset(bad, 0, sizeof(int));
    handoff<<<4, 32 + 256>>>(mode, bad);
    cudaError_t err = cudaDeviceSynchronize();
    cudaMemcpy(&host, bad, sizeof(int), cudaMemcpyDeviceToHost);
    printf("mode %d (%s): %s, %d wrong reads\n", mode, mode ? "every lane arrives" : "lane 0 arrives after __syncwarp",
           cudaGetErrorString(err), host);
    return err != cudaSuccess || host != 0;
}

/* parallel/schedule_order.h — what the builders in parallel/schedule.c and
 * parallel/schedule_zb.c share (internal to parallel/schedule*.c): a stage's
 * work as an ordered list of forwards, backwards (B where the backward is
 * split) and W's, before the builder adds the sends and receives. */
#pragma once

typedef struct { int forward, mb, chunk, weight; } Work;   /* weight: W (split schedules; forward 0); else a backward is B there */

/* The zero-bubble orders (parallel/schedule_zb.c) of kind PP_ZB1 (zb1_memory: ZB1_MEMORY_*) or PP_ZBV for p stages
 * and m micro-batches: stage st's n[st] pieces at w + st*3*v*m (v chunks: 1, ZB-V 2). Returns the micro-batches a
 * stage holds at most. */
int zb_orders(int kind, int p, int m, int zb1_memory, Work *w, int *n);

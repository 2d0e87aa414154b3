/* runtime/ep_plan.c -- the host side of the expert-parallel bookkeeping
 * (ep_plan.h holds the math, shared with the device path). */
#include "ep_plan.h"

#include <stdio.h>

int moegen_ep_local_experts(int experts, int ranks, char *why, size_t why_size) {
  if (ranks >= 1 && experts >= 1 && experts % ranks == 0) return experts / ranks;
  if (why && why_size)
    snprintf(why, why_size,
             "expert parallelism splits the experts evenly over the ranks: experts = %d is not "
             "a positive multiple of ranks = %d", experts, ranks);
  return -1;
}

void moegen_ep_recv_layout(moegen_ep_mode mode, int R, int El, int64_t pair_rows,
                           const int32_t *recv_counts, int32_t *split, int32_t *sorted,
                           int64_t *recv_first, int32_t *local_offsets) {
  const int S = R * (El + 1);
  for (int c = 0; c < S; c++) {
    split[c] = moegen_ep_recv_split(mode, recv_counts, El, pair_rows, c);
    sorted[c] = moegen_ep_sorted_index(R, El, c);
  }
  for (int s = 0; s <= R; s++) recv_first[s] = moegen_ep_recv_first(mode, recv_counts, El, s, pair_rows);
  for (int j = 0; j <= El; j++) local_offsets[j] = (int32_t)moegen_ep_local_offset(recv_counts, R, El, j);
}

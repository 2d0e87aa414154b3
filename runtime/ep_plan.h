/* runtime/ep_plan.h -- expert-parallel (EP) bookkeeping: who sends which
 * rows where, how a rank lays out what it receives, and how it regroups it
 * by local expert. Pure integer math, no state, no allocation; the same
 * inline functions serve the host (ep_plan.c, the CPU simulation test) and a
 * CUDA template (include this header; MOEGEN_EP_FN adds __host__ __device__),
 * so the device path computes exactly what the host one does.
 *
 * The model (R ranks, E experts, El = E / R local experts per rank):
 *  - rank r owns the global experts [r*El, (r+1)*El) (E % R == 0);
 *  - each rank permutes its own tokens over all E experts (moegen_permute_fwd,
 *    expert-major rows, offsets [E+1]); since rank d's experts are contiguous,
 *    the rows bound for rank d are the one slice [offsets[d*El],
 *    offsets[(d+1)*El]) of the permuted buffer;
 *  - "chunk sizes" are the per-expert row counts offsets[e+1] - offsets[e]
 *    (pad rows included when align > 1): what a sender tells each receiver,
 *    El int32 per rank pair (the counts all-to-all);
 *  - recv_counts [R, El] on rank r: recv_counts[s*El + j] = the chunk size of
 *    global expert r*El + j on source rank s.
 *
 * Two modes:
 *  - EXACT: variable sizes. Source s's rows land at recv_offset(s) = the sum
 *    of the earlier sources' rows, back to back; total N = sum(recv_counts).
 *  - CAPACITY: fixed sizes, no host sync. Each source keeps at most `cap`
 *    routes per expert (moegen_permute_fwd's capacity: earliest tokens kept,
 *    the rest dropped and counted there), so a rank pair exchanges a fixed
 *    pair_rows = El * roundup(cap, align) rows: slot s of the receive buffer
 *    is [s*pair_rows, (s+1)*pair_rows), its first sum_j recv_counts[s*El+j]
 *    rows valid and the rest (the slot's "tail") ignored. The sender sends
 *    pair_rows rows from offsets[d*El]; this stays inside a send buffer of
 *    E * roundup(cap, align) rows since offsets[d*El] <= d * pair_rows.
 *
 * Receive chunks (both modes, S = R * (El + 1) chunks, source-major):
 * chunk s*(El+1) + j (j < El) is source s's rows of local expert j, chunk
 * s*(El+1) + El is slot s's tail (0 rows in EXACT). moegen_sort_chunks with
 * these split sizes and sorted_index[i] = chunk_of(i) (local-expert-major:
 * i = j*R + s for j < El, then the R tails) regroups the received rows by
 * local expert, which the grouped GEMMs need; local_offset(j) are then the
 * GEMM offsets [El + 1]. The combine runs the same sort backward (the rows
 * go back to source-major order) and returns slot s to source s.
 *
 * Home side of the combine: EXACT returns rank d's rows straight into the
 * slice they left from. CAPACITY receives each rank's fixed pair_rows into a
 * staging slot d*pair_rows; a second chunk sort (2R chunks: chunk 2d = the
 * valid rows of slot d, chunk 2d+1 its tail; home_sorted_index) packs the
 * valid rows back at offsets[d*El], the permuted layout unpermute reads.
 */
#ifndef MOEGEN_RUNTIME_EP_PLAN_H
#define MOEGEN_RUNTIME_EP_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "moegen/types.h" /* moegen_ep_mode */

#ifdef __CUDACC__
#define MOEGEN_EP_FN static inline __host__ __device__
#else
#define MOEGEN_EP_FN static inline
#endif

/* Rank owning global expert e (El local experts per rank). */
MOEGEN_EP_FN int moegen_ep_owner(int e, int El) { return e / El; }

/* Rows a rank pair exchanges in CAPACITY mode: El * roundup(cap, align). */
MOEGEN_EP_FN int64_t moegen_ep_pair_rows(int El, int cap, int align) {
  return (int64_t)El * (((int64_t)cap + align - 1) / align * align);
}

/* First row of the slice bound for rank d in the sender's permuted rows
 * (offsets [E+1] of its moegen_permute_fwd). */
MOEGEN_EP_FN int32_t moegen_ep_send_first(const int32_t *offsets, int El, int d) {
  return offsets[d * El];
}

/* Rows sent to rank d: the slice's rows (EXACT) or pair_rows (CAPACITY). */
MOEGEN_EP_FN int64_t moegen_ep_send_rows(moegen_ep_mode mode, const int32_t *offsets, int El,
                                         int d, int64_t pair_rows) {
  return mode == MOEGEN_EP_CAPACITY ? pair_rows
                                    : (int64_t)offsets[(d + 1) * El] - offsets[d * El];
}

/* Chunk size the sender reports for global expert e (recv_counts' entries). */
MOEGEN_EP_FN int32_t moegen_ep_chunk_size(const int32_t *offsets, int e) {
  return offsets[e + 1] - offsets[e];
}

/* Valid rows source s sent (recv_counts [R, El] of the receiver). */
MOEGEN_EP_FN int64_t moegen_ep_valid_rows(const int32_t *recv_counts, int El, int s) {
  int64_t n = 0;
  for (int j = 0; j < El; j++) n += recv_counts[s * El + j];
  return n;
}

/* First receive-buffer row of source s's slot. */
MOEGEN_EP_FN int64_t moegen_ep_recv_first(moegen_ep_mode mode, const int32_t *recv_counts, int El,
                                          int s, int64_t pair_rows) {
  if (mode == MOEGEN_EP_CAPACITY) return (int64_t)s * pair_rows;
  int64_t n = 0;
  for (int q = 0; q < s; q++) n += moegen_ep_valid_rows(recv_counts, El, q);
  return n;
}

/* Rows in the receive buffer: pair_rows * R (CAPACITY) or sum(recv_counts). */
MOEGEN_EP_FN int64_t moegen_ep_recv_rows(moegen_ep_mode mode, const int32_t *recv_counts, int R,
                                         int El, int64_t pair_rows) {
  return moegen_ep_recv_first(mode, recv_counts, El, R, pair_rows);
}

/* Size of receive chunk c (c = s*(El+1) + j; j = El is slot s's tail). */
MOEGEN_EP_FN int32_t moegen_ep_recv_split(moegen_ep_mode mode, const int32_t *recv_counts, int El,
                                          int64_t pair_rows, int c) {
  const int s = c / (El + 1), j = c % (El + 1);
  if (j < El) return recv_counts[s * El + j];
  return mode == MOEGEN_EP_CAPACITY
             ? (int32_t)(pair_rows - moegen_ep_valid_rows(recv_counts, El, s))
             : 0;
}

/* sorted_index[i] of the regrouping sort (R*(El+1) entries): local expert j
 * of source s is output chunk j*R + s; the R tails come last. */
MOEGEN_EP_FN int32_t moegen_ep_sorted_index(int R, int El, int i) {
  if (i >= El * R) return (i - El * R) * (El + 1) + El;
  return (i % R) * (El + 1) + i / R;
}

/* Row of local expert j's first row after the regrouping sort (the grouped
 * GEMMs' offsets [El + 1]; j = El gives the rows the GEMMs read). */
MOEGEN_EP_FN int64_t moegen_ep_local_offset(const int32_t *recv_counts, int R, int El, int j) {
  int64_t n = 0;
  for (int q = 0; q < j; q++)
    for (int s = 0; s < R; s++) n += recv_counts[s * El + q];
  return n;
}

/* CAPACITY home compaction: size of staging chunk c (2R chunks; 2d = the
 * valid rows rank d returned, 2d+1 the rest of its slot), from the home
 * rank's own permute offsets. */
MOEGEN_EP_FN int32_t moegen_ep_home_split(const int32_t *offsets, int El, int64_t pair_rows, int c) {
  const int d = c / 2;
  const int32_t valid = offsets[(d + 1) * El] - offsets[d * El];
  return c % 2 ? (int32_t)(pair_rows - valid) : valid;
}

/* CAPACITY home compaction: sorted_index[i] (2R entries): valid chunks in
 * rank order, then the tails. */
MOEGEN_EP_FN int32_t moegen_ep_home_sorted_index(int R, int i) {
  return i < R ? 2 * i : 2 * (i - R) + 1;
}

/* ---------------------------------------------------------------- host (ep_plan.c) */

/* Local experts per rank, E / R; -1 with a message in why[why_size] (naming
 * the experts and ranks) if R < 1, E < 1 or E % R != 0. */
int moegen_ep_local_experts(int experts, int ranks, char *why, size_t why_size);

/* One rank's receive layout from its recv_counts [R, El] (host arrays):
 * split [R*(El+1)] and sorted [R*(El+1)] for moegen_sort_chunks, recv_first
 * [R+1] (recv_first[R] = rows in the receive buffer), local_offsets [El+1]. */
void moegen_ep_recv_layout(moegen_ep_mode mode, int R, int El, int64_t pair_rows,
                           const int32_t *recv_counts, int32_t *split, int32_t *sorted,
                           int64_t *recv_first, int32_t *local_offsets);

#endif

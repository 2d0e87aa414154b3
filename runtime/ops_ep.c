/* runtime/ops_ep.c -- expert-parallel dispatch and combine over NCCL
 * (moegen/runtime.h, "expert parallelism"). The sizes come from
 * ep_plan.h's functions; the data moves by ncclSend/ncclRecv (bytes) and
 * the module's chunk sort regroups it. No kernels of its own. */
#include <string.h>

#include "ep_plan.h"
#include "module.h"
#include "nccl.h"
#include "ops.h"

enum { ALIGN = 256 }; /* every carved state buffer's alignment */

/* The state's carving for R ranks, El local experts, N receive rows of row_bytes. */
typedef struct ep_layout {
  int R, El, S;                 /* ranks, local experts, chunks R * (El + 1) */
  int64_t N, H;                 /* receive-row bound, hidden size */
  size_t split, sorted, rows, probs, bytes;
} ep_layout;

static size_t take(size_t *cursor, size_t bytes) {
  size_t at = *cursor;
  *cursor += (bytes + ALIGN - 1) / ALIGN * ALIGN;
  return at;
}

/* 0 and the layout, or -1 (the shape function's INVALID_ARGUMENT cases). */
static int layout_of(const moegen_image *img, int ranks, int64_t max_tokens, ep_layout *L) {
  const int E = img->permute.experts;
  const int El = moegen_ep_local_experts(E, ranks, NULL, 0);
  if (El < 0 || max_tokens < 0) return -1;
  memset(L, 0, sizeof *L);
  L->R = ranks;
  L->El = El;
  L->S = ranks * (El + 1);
  if (L->S > img->permute.max_chunks) return -1;
  L->H = img->permute.hidden;
  L->N = (int64_t)ranks * max_tokens * img->permute.topk;
  size_t c = 0;
  L->split = take(&c, 4 * (size_t)L->S);
  L->sorted = take(&c, 4 * (size_t)L->S);
  L->rows = take(&c, 2 * (size_t)(L->N * L->H)); /* bf16 / fp16 */
  L->probs = take(&c, 4 * (size_t)L->N);
  L->bytes = c;
  return 0;
}

moegen_status moegen_ep_available(char *why, size_t why_size) {
  const moegen_nccl *n;
  return moegen_nccl_get(&n, why, why_size);
}

moegen_status moegen_ep_shape_of(const moegen_image *image, int ranks, int64_t max_tokens,
                                 moegen_ep_mode mode, moegen_ep_shape *shape) {
  ep_layout L;
  if (!image || !shape || (mode != MOEGEN_EP_EXACT && mode != MOEGEN_EP_CAPACITY) ||
      layout_of(image, ranks, max_tokens, &L))
    return MOEGEN_ERR_INVALID_ARGUMENT;
  memset(shape, 0, sizeof *shape);
  shape->local_experts = L.El;
  shape->recv_rows[0] = L.N;
  shape->recv_rows[1] = L.H;
  shape->recv_offsets[0] = ranks;
  shape->recv_offsets[1] = L.El + 1;
  shape->local_offsets[0] = L.El + 1;
  shape->host_sizes[0] = 3 * (int64_t)ranks + 1;
  shape->state_bytes = L.bytes;
  return MOEGEN_OK;
}

#define AT(base, off) ((void *)((const char *)(base) + (off)))

/* What dispatch and combine check; loads NCCL and fills the layout. */
static moegen_status check_ep(moegen_module *m, const char *what, const moegen_ep_args *a,
                              const moegen_nccl **nccl, ep_layout *L) {
  const moegen_image *img = moegen_module_image(m);
  char why[512];
  if (moegen_nccl_get(nccl, why, sizeof why) != MOEGEN_OK)
    return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED, "%s: %s", what, why);
  if (a->mode == MOEGEN_EP_CAPACITY)
    return moegen_module_fail(m, MOEGEN_ERR_NOT_SUPPORTED,
                              "%s: MOEGEN_EP_CAPACITY is not implemented on the device yet (its "
                              "send slices start at device-computed offsets; use "
                              "MOEGEN_EP_EXACT)", what);
  if (a->mode != MOEGEN_EP_EXACT)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: mode = %d is no moegen_ep_mode",
                              what, (int)a->mode);
  if (moegen_ep_local_experts(img->permute.experts, a->ranks, why, sizeof why) < 0)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: %s", what, why);
  if (layout_of(img, a->ranks, a->max_tokens, L))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: max_tokens = %lld < 0, or ranks * (E / ranks + 1) = %d chunks "
                              "exceed the chunk sort's %d", what, (long long)a->max_tokens,
                              a->ranks * (img->permute.experts / a->ranks + 1),
                              img->permute.max_chunks);
  if (!a->comm || a->rank < 0 || a->rank >= a->ranks)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: comm = %p, rank = %d must be a communicator and a rank in "
                              "[0, ranks = %d)", what, (void *)a->comm, a->rank, a->ranks);
  int count = -1, me = -1;
  if ((*nccl)->ncclCommCount(a->comm, &count) || (*nccl)->ncclCommUserRank(a->comm, &me) ||
      count != a->ranks || me != a->rank)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: the communicator has %d ranks and is rank %d; the arguments "
                              "say ranks = %d, rank = %d", what, count, me, a->ranks, a->rank);
  if (a->dtype != MOEGEN_DTYPE_BF16 && a->dtype != MOEGEN_DTYPE_FP16)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT, "%s: dtype must be bf16 or fp16",
                              what);
  if (a->num_rows < 0 || a->num_rows > a->max_tokens * img->permute.topk)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: num_rows = %lld is outside [0, max_tokens * K = %lld]", what,
                              (long long)a->num_rows,
                              (long long)(a->max_tokens * img->permute.topk));
  if (!a->state || a->state_bytes < L->bytes || (uintptr_t)a->state % ALIGN || !a->host_sizes)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "%s: state = %p (%zu bytes) must be %d-byte aligned and hold %zu "
                              "bytes, host_sizes non-NULL (moegen_ep_shape_of)", what, a->state,
                              a->state_bytes, ALIGN, L->bytes);
  return MOEGEN_OK;
}

static moegen_status nccl_fail(moegen_module *m, const moegen_nccl *n, int r, const char *what,
                               const char *call) {
  return moegen_module_fail(m, MOEGEN_ERR_CUDA, "%s: %s failed: NCCL error %d (%s)", what, call, r,
                            n->ncclGetErrorString(r));
}

/* One NCCL group of a send and a receive per peer p: srows[p] rows of
 * row_bytes from src + sfirst[p] rows, rrows[p] rows into dst + rfirst[p]
 * rows (both ends compute the same sizes: ep_plan.h). */
static moegen_status exchange(moegen_module *m, const moegen_nccl *n, const moegen_ep_args *a,
                              const char *what, size_t row_bytes, const void *src,
                              const int64_t *sfirst, const int64_t *srows, void *dst,
                              const int64_t *rfirst, const int64_t *rrows, CUstream stream) {
  int r = n->ncclGroupStart();
  if (r) return nccl_fail(m, n, r, what, "ncclGroupStart");
  for (int p = 0; p < a->ranks && !r; p++) {
    r = n->ncclSend(AT(src, (size_t)sfirst[p] * row_bytes), (size_t)srows[p] * row_bytes,
                    MOEGEN_NCCL_INT8, p, a->comm, stream);
    if (!r)
      r = n->ncclRecv(AT(dst, (size_t)rfirst[p] * row_bytes), (size_t)rrows[p] * row_bytes,
                      MOEGEN_NCCL_INT8, p, a->comm, stream);
  }
  int e = n->ncclGroupEnd(); /* also after a failed call: the group must be closed */
  if (r) return nccl_fail(m, n, r, what, "ncclSend/ncclRecv");
  return e ? nccl_fail(m, n, e, what, "ncclGroupEnd") : MOEGEN_OK;
}

/* Dispatch's data: the rows (and probs) by one NCCL group each, then the
 * regrouping by local expert (the chunk tables in state). */
static moegen_status move_rows(moegen_module *m, const moegen_nccl *n, const moegen_ep_args *a,
                               const ep_layout *L, const int64_t *sfirst, const int64_t *srows,
                               const int64_t *recv_first, const int64_t *rrows, CUstream stream) {
  moegen_status st = exchange(m, n, a, "ep_dispatch (rows)", (size_t)L->H * 2, a->rows, sfirst,
                              srows, AT(a->state, L->rows), recv_first, rrows, stream);
  if (st == MOEGEN_OK && a->probs)
    st = exchange(m, n, a, "ep_dispatch (probs)", 4, a->probs, sfirst, srows,
                  AT(a->state, L->probs), recv_first, rrows, stream);
  if (st != MOEGEN_OK) return st;
  moegen_sort_chunks_args sa = {.num_rows = recv_first[a->ranks],
                                .dtype = a->dtype,
                                .num_chunks = L->S,
                                .split_sizes = AT(a->state, L->split),
                                .sorted_index = AT(a->state, L->sorted),
                                .in = AT(a->state, L->rows),
                                .out = a->recv_rows,
                                .probs = a->probs ? AT(a->state, L->probs) : NULL,
                                .out_probs = a->recv_probs};
  return moegen_sort_chunks(m, &sa, stream);
}

moegen_status moegen_ep_dispatch(moegen_module *m, const moegen_ep_args *a, CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_nccl *n;
  ep_layout L;
  moegen_status st = check_ep(m, "ep_dispatch", a, &n, &L);
  if (st != MOEGEN_OK) return st;
  if ((!a->reuse && (!a->offsets || !a->recv_offsets || !a->local_offsets)) ||
      (L.N > 0 && !a->recv_rows) || (a->num_rows > 0 && !a->rows) ||
      (L.N > 0 && !a->probs != !a->recv_probs))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "ep_dispatch: offsets, recv_offsets, local_offsets (unless reuse), "
                              "recv_rows (unless the receive bound is 0) and rows (unless "
                              "num_rows = 0) are required; recv_probs iff probs");
  const int R = a->ranks, El = L.El, E = R * El;
  const moegen_driver *d = moegen_module_driver(m);
  int64_t *sfirst = a->host_sizes, *srows = sfirst + R, *recv_first = srows + R, rrows[R];
  if (a->reuse) {
    for (int p = 0; p < R; p++) rrows[p] = recv_first[p + 1] - recv_first[p];
    if (recv_first[R] < 0 || recv_first[R] > L.N)
      return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                                "ep_dispatch: reuse = 1 but host_sizes says %lld rows (bound "
                                "%lld): pass the earlier dispatch's", (long long)recv_first[R],
                                (long long)L.N);
    return move_rows(m, n, a, &L, sfirst, srows, recv_first, rrows, stream);
  }
  /* 1. The counts: each peer gets my offsets of its experts (El + 1 int32).
   * Host tables are sized by this call's E and R (variable-length arrays). */
  int64_t cfirst[R], crows[R], rfirst[R];
  for (int p = 0; p < R; p++) {
    cfirst[p] = (int64_t)p * El;
    rfirst[p] = (int64_t)p * (El + 1);
    crows[p] = El + 1;
  }
  st = exchange(m, n, a, "ep_dispatch (counts)", 4, a->offsets, cfirst, crows, a->recv_offsets,
                rfirst, crows, stream);
  if (st != MOEGEN_OK) return st;
  /* 2. The one sync: NCCL takes host sizes. */
  int32_t offs[E + 1], roffs[L.S], counts[E], split[L.S], sorted[L.S], loffs[El + 1];
  CUresult r = d->cuStreamSynchronize(stream);
  if (!r) r = d->cuMemcpyDtoH(offs, (CUdeviceptr)(uintptr_t)a->offsets, 4 * (size_t)(E + 1));
  if (!r) r = d->cuMemcpyDtoH(roffs, (CUdeviceptr)(uintptr_t)a->recv_offsets, 4 * (size_t)L.S);
  if (r) return moegen_module_cuda_fail(m, r, "ep_dispatch: the counts to the host");
  /* 3. The layout (ep_plan.h). */
  for (int s = 0; s < R; s++)
    for (int j = 0; j < El; j++)
      counts[s * El + j] = moegen_ep_chunk_size(roffs + s * (El + 1), j);
  moegen_ep_recv_layout(MOEGEN_EP_EXACT, R, El, 0, counts, split, sorted, recv_first, loffs);
  for (int p = 0; p < R; p++) {
    sfirst[p] = moegen_ep_send_first(offs, El, p);
    srows[p] = moegen_ep_send_rows(MOEGEN_EP_EXACT, offs, El, p, 0);
    rrows[p] = recv_first[p + 1] - recv_first[p];
  }
  const int64_t N = recv_first[R];
  if (offs[E] > a->num_rows || N > L.N)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "ep_dispatch: rank %d's permute has %d rows (num_rows = %lld) and it "
                              "receives %lld (bound %lld): a rank exceeded max_tokens = %lld",
                              a->rank, offs[E], (long long)a->num_rows, (long long)N,
                              (long long)L.N, (long long)a->max_tokens);
  r = d->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)AT(a->state, L.split), split, 4 * (size_t)L.S,
                           stream);
  if (!r)
    r = d->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)AT(a->state, L.sorted), sorted,
                             4 * (size_t)L.S, stream);
  if (!r)
    r = d->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)a->local_offsets, loffs, 4 * (size_t)(El + 1),
                             stream);
  if (r) return moegen_module_cuda_fail(m, r, "ep_dispatch: cuMemcpyHtoDAsync(chunk tables)");
  return move_rows(m, n, a, &L, sfirst, srows, recv_first, rrows, stream);
}
moegen_status moegen_ep_combine(moegen_module *m, const moegen_ep_args *a, CUstream stream) {
  if (!m || !a) return MOEGEN_ERR_INVALID_ARGUMENT;
  const moegen_nccl *n;
  ep_layout L;
  moegen_status st = check_ep(m, "ep_combine", a, &n, &L);
  if (st != MOEGEN_OK) return st;
  const int R = a->ranks;
  const int64_t *sfirst = a->host_sizes, *srows = sfirst + R, *recv_first = srows + R;
  const int64_t N = recv_first[R];
  if (N < 0 || N > L.N || ((N > 0 && !a->results) || (a->num_rows > 0 && !a->home_rows)))
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "ep_combine: host_sizes says %lld rows (bound %lld): pass "
                              "ep_dispatch's; results and home_rows are required", (long long)N,
                              (long long)L.N);
  if (!a->results_probs != !a->home_probs)
    return moegen_module_fail(m, MOEGEN_ERR_INVALID_ARGUMENT,
                              "ep_combine: home_probs iff results_probs");
  moegen_sort_chunks_args sa = {.num_rows = N,
                                .dtype = a->dtype,
                                .num_chunks = L.S,
                                .split_sizes = AT(a->state, L.split),
                                .sorted_index = AT(a->state, L.sorted),
                                .in = a->results,
                                .out = AT(a->state, L.rows),
                                .probs = a->results_probs,
                                .out_probs = a->results_probs ? AT(a->state, L.probs) : NULL,
                                .backward = 1};
  st = moegen_sort_chunks(m, &sa, stream);
  if (st != MOEGEN_OK) return st;
  int64_t back[R]; /* rows of slot p, returned to rank p */
  for (int p = 0; p < R; p++) back[p] = recv_first[p + 1] - recv_first[p];
  st = exchange(m, n, a, "ep_combine (rows)", (size_t)L.H * 2, AT(a->state, L.rows), recv_first,
                back, a->home_rows, sfirst, srows, stream);
  if (st == MOEGEN_OK && a->results_probs)
    st = exchange(m, n, a, "ep_combine (probs)", 4, AT(a->state, L.probs), recv_first, back,
                  a->home_probs, sfirst, srows, stream);
  return st;
}

// moegen grouped GEMM, the parts every GEMM kernel shares whatever its
// matrix instructions (the sm_90a wgmma kernels and the portable mma.sync
// ones): the expert tile tables and their decoding, and the epilogues that
// store an accumulator strip. The including template defines ggemm::E (the
// experts) first. No toolkit headers.
#ifndef MOEGEN_GEMM_COMMON
#define MOEGEN_GEMM_COMMON

// Shared-window address of a generic pointer to shared memory.
__device__ __forceinline__ u32 smem_addr(const void *p) {
  u32 a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// Two floats as packed bf16 (lo at the lower address).
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

namespace ggemm {
// Shared memory of the tables: tile starts ts[E + 1], row starts rs[E + 1],
// then 32 ints of scan scratch.
constexpr int TABLE_BYTES = (8 * (E + 1) + 4 * 32 + 15) / 16 * 16;
static_assert(E >= 1 && E <= 2048, "experts");

struct __align__(8) f32x2 { float x, y; };
struct __align__(8) u32x2 { u32 x, y; };
__device__ __forceinline__ float bf16_lo(u32 v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(u32 v) { return __uint_as_float(v & 0xffff0000u); }
// The SwiGLU epilogues divide with __fdividef (MUFU.RCP and a multiply, at
// most 2 ulp, far below the bf16 outputs' rounding) rather than IEEE '/'
// (a Newton step and a slow-path branch an element): DeepSeek-V3's
// gemm2_dgrad_glu_tall, 128 such divisions a thread, compiled in 5.3 s with
// '/' and 1.75 s so (NVRTC 13.0, one CPU), the JIT's longest kernel.
__device__ __forceinline__ float silu(float g) { return __fdividef(g, 1.f + __expf(-g)); }

// One tile of a row-tiled index space.
struct Tile {
  int e;    // expert
  int row0; // first row of expert e in X and Y
  int rows; // m_e
  int m0;   // first row of the tile within the expert
  int n0;   // first column
};

// The column-group width of decode for an expert of mt row tiles in a
// row-tiled kernel of NT column tiles whose tiles load TBM rows of A and BB
// rows of B per k step. Model: tiles started within WINDOW tickets of each
// other share what they load in L2, farther ones do not; with groups of g
// column tiles the expert reads its A row tiles ceil(NT / g) times and its
// B strips ceil(mt g / WINDOW) times; g is the power of two <= min(NT,
// WINDOW) with the fewest bytes (TBM mt ceil(NT / g) + BB NT ceil(mt g /
// WINDOW), times K * 2). Below MIN_MT row tiles the order stays M-fastest
// (g = 1): there the model was wrong on an H100 (bench/RESULTS.md run 20:
// with g from the mean of the call's experts, every g > 1 it picked at a
// mean <= 2 was 0-9% slower; DeepSeek-V3 gemm1 at T = 16384 read 25 GB of
// DRAM against 24: an expert's few tiles already share its A row tiles in
// L2); at a mean >= 4 it gained up to 25% (Mixtral gemm2 at T = 16384: DRAM
// 26 -> 10 GB, 8.0 -> 6.0 ms). From the expert's own mt, not the mean, so
// that skewed routing groups only its big experts' tiles.
template <int NT, int TBM, int BB>
__device__ __forceinline__ int group_cols(int mt) {
  constexpr int WINDOW = 16, MIN_MT = 4;
  if (mt < MIN_MT) return 1;
  int best = 1;
  long long best_cost = 0;
  for (int g = 1; g <= NT && g <= WINDOW; g *= 2) {
    const long long cost = (long long)TBM * mt * ((NT + g - 1) / g) +
                           (long long)BB * NT * ((mt * g + WINDOW - 1) / WINDOW);
    if (g == 1 || cost < best_cost) best = g, best_cost = cost;
  }
  return best;
}

// Tile t of the space whose expert e spans tiles [ts[e] * NT, ts[e+1] * NT),
// tiles of TBM rows and BN columns (BB rows of B a k step: group_cols):
// experts in order; within an expert, groups of gn = group_cols(its row
// tiles) column tiles (the last group may be narrower), each group's tiles
// row tile by row tile, its gn column tiles fastest. gn = 1: M tiles
// fastest (the CTAs that run together share a weight strip); gn = NT: N
// tiles fastest (they share an X row tile).
template <int NT, int BN, int TBM, int BB>
__device__ __forceinline__ Tile decode(int t, const int *ts, const int *rs) {
  const int q = t / NT; // M-tile index over all experts
  int lo = 0, hi = E - 1; // last e with ts[e] <= q: the one with tiles (ts[e+1] > q)
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (ts[mid] <= q) lo = mid;
    else hi = mid - 1;
  }
  const int mt = ts[lo + 1] - ts[lo], local = t - ts[lo] * NT, gn = group_cols<NT, TBM, BB>(mt);
  const int g = local / (mt * gn), w = local - g * mt * gn; // group, place in it
  const int gw = min(gn, NT - g * gn);                       // the group's column tiles
  const int m = w / gw;
  Tile tl;
  tl.e = lo;
  tl.row0 = rs[lo];
  tl.rows = rs[lo + 1] - rs[lo];
  tl.m0 = m * TBM;
  tl.n0 = (g * gn + w - m * gw) * BN;
  return tl;
}

// rs[0..E] (row starts: offsets as given, else the exclusive prefix of the
// counts) and ts[0..E] (exclusive prefix of ceil(m_e / TBM)); every one of
// the block's THREADS threads calls it (one __syncthreads inside).
template <int THREADS, int TBM>
__device__ __forceinline__ void build_tables(const int *counts, const int *offsets, int *ts, int *rs,
                                             int *scratch) {
  constexpr int PER = (E + THREADS - 1) / THREADS;
  static_assert(THREADS % 32 == 0 && THREADS / 32 <= 16, "scan scratch: 16 warps");
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, e0 = tid * PER;
  int m[PER], rows = 0, tiles = 0;
#pragma unroll
  for (int i = 0; i < PER; i++) {
    const int e = e0 + i;
    int v = 0;
    if (e < E) v = offsets ? offsets[e + 1] - offsets[e] : counts[e];
    m[i] = v > 0 ? v : 0;
    rows += m[i];
    tiles += (m[i] + TBM - 1) / TBM;
  }
  int rin = rows, tin = tiles; // inclusive warp scans
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const int r = __shfl_up_sync(MOEGEN_FULL_MASK, rin, o), t = __shfl_up_sync(MOEGEN_FULL_MASK, tin, o);
    if (lane >= o) rin += r, tin += t;
  }
  if (lane == 31) scratch[warp] = rin, scratch[16 + warp] = tin;
  __syncthreads();
  int rbase = rin - rows, tbase = tin - tiles;
  for (int w = 0; w < warp; w++) rbase += scratch[w], tbase += scratch[16 + w];
#pragma unroll
  for (int i = 0; i < PER; i++) {
    const int e = e0 + i;
    if (e < E) {
      ts[e] = tbase;
      rs[e] = offsets ? offsets[e] : rbase;
    }
    rbase += m[i];
    tbase += (m[i] + TBM - 1) / TBM;
  }
  if (tid == THREADS - 1) { // its bases are now the totals
    ts[E] = tbase;
    rs[E] = offsets ? offsets[E] : rbase;
  }
}

// One wgrad tile: expert e, dW rows m0.. (of N, tiles of WBM), columns n0..
// (of K, tiles of BN; nt the column tile).
struct WTile {
  int e, row0, rows, m0, n0, nt;
};
template <int N, int K, int WBM, int BN>
__device__ __forceinline__ WTile wdecode(int t, const int *rs) {
  constexpr int MT = (N + WBM - 1) / WBM, NT = (K + BN - 1) / BN;
  WTile w;
  w.e = t / (MT * NT);
  const int local = t - w.e * (MT * NT);
  w.nt = local / MT;
  w.m0 = (local - w.nt * MT) * WBM;
  w.n0 = w.nt * BN;
  w.row0 = rs[w.e];
  w.rows = rs[w.e + 1] - rs[w.e];
  return w;
}

// What the epilogues write (kernel parameters, by mode).
struct Out {
  void *y;            // FWD Y bf16 [rows, N]; DGRAD dX bf16 [rows, K]; WGRAD dW [E, N, K]
                      // (bf16, or fp32 if accumulate); GLU act bf16 [rows, N / 2]
  void *aux;          // WGRAD db fp32 [E, N] or null; GLU h bf16 [rows, N] (pre-activation) or null
  const bf16_t *bias; // GLU b bf16 [E, N] or null
  const float *prob;  // GLU prob fp32 [rows] or null
  int accumulate;     // WGRAD: 1 = dW, db fp32 +=, 0 = dW bf16, db fp32 =
  const bf16_t *h;    // DGLU: h bf16 [rows, 2K] saved by GLU (y is then dh [rows, 2K])
  float *dprob;       // DGLU: dprob fp32 [rows] (+=), or null
};

// ---------------------------------------------------------------- epilogues
// Each stores one warp's accumulator strip: W columns of 16 rows, the layout
// of wgmma's m64nW per-warp slice and of W / 8 mma.sync m16n8 fragments side
// by side. Lane l holds row l / 4 at columns 8j + 2(l % 4) + {0, 1} as
// a[4j + {0, 1}] and row l / 4 + 8 as a[4j + {2, 3}], j < W / 8. `col` is the
// strip's first column plus 2(l % 4); `grow` the global row of row l / 4,
// ok0 / ok1 whether rows l / 4 and l / 4 + 8 are stored. TW: the columns
// of the tile the strip lies in (tiles start at multiples of TW, so with
// C % TW == 0 no column is past the end and the guards compile away).

// bf16 rows of y [rows, C]: columns < C.
template <int C, int W, int TW>
__device__ __forceinline__ void store_rows(bf16_t *y, const float (&a)[W / 2], long long grow, bool ok0,
                                           bool ok1, int col) {
  u32 *y0 = reinterpret_cast<u32 *>(y + grow * C + col);
  u32 *y1 = y0 + 4 * C; // 8 rows down, in u32 units
#pragma unroll
  for (int j = 0; j < W / 8; j++) {
    if (C % TW == 0 || col + 8 * j < C) {
      if (ok0) y0[4 * j] = pack_bf16x2(a[4 * j], a[4 * j + 1]);
      if (ok1) y1[4 * j] = pack_bf16x2(a[4 * j + 2], a[4 * j + 3]);
    }
  }
}

// SwiGLU forward of gemm1 (N = 2F outputs, expert e): the strip's first W / 2
// columns are gate columns f = col + 8j (j < W / 16), the last W / 2 the up
// columns of the same f. act = silu(g + b) * (u + b) * prob (bf16 [rows, F]),
// and h = (g + b, u + b) (bf16 [rows, N]) when o.aux is set. TW counts act
// columns. Row by row (row l / 4, then l / 4 + 8), which keeps fewer
// temporaries live next to a 256 x 192 tile's 192 accumulators than
// column pair by column pair, at the cost of reading the bias once a row.
template <int N, int W, int TW>
__device__ __forceinline__ void store_glu(const Out &o, const float (&a)[W / 2], int e, int grow,
                                          bool ok0, bool ok1, int col) {
  constexpr int F = N / 2, UP = W / 16; // acc group of the up column paired with gate group j
  bf16_t *act = static_cast<bf16_t *>(o.y);
  bf16_t *h = static_cast<bf16_t *>(o.aux);
#pragma unroll
  for (int half = 0; half < 2; half++) {
    if (!(half ? ok1 : ok0)) continue;
    const int rr = grow + 8 * half;
    const float p = o.prob ? o.prob[rr] : 1.f;
#pragma unroll
    for (int j = 0; j < W / 16; j++) {
      const int f = col + 8 * j;
      if (F % TW == 0 || f < F) {
        float bg0 = 0.f, bg1 = 0.f, bu0 = 0.f, bu1 = 0.f;
        if (o.bias) {
          const u32 *b = reinterpret_cast<const u32 *>(o.bias + (long long)e * N + f);
          const u32 g2 = b[0], u2 = b[F / 2];
          bg0 = bf16_lo(g2), bg1 = bf16_hi(g2), bu0 = bf16_lo(u2), bu1 = bf16_hi(u2);
        }
        const float g0 = a[4 * j + 2 * half] + bg0, g1 = a[4 * j + 2 * half + 1] + bg1;
        const float u0 = a[4 * (j + UP) + 2 * half] + bu0;
        const float u1 = a[4 * (j + UP) + 2 * half + 1] + bu1;
        *reinterpret_cast<u32 *>(act + (long long)rr * F + f) =
            pack_bf16x2(silu(g0) * u0 * p, silu(g1) * u1 * p);
        if (h) {
          *reinterpret_cast<u32 *>(h + (long long)rr * N + f) = pack_bf16x2(g0, g1);
          *reinterpret_cast<u32 *>(h + (long long)rr * N + F + f) = pack_bf16x2(u0, u1);
        }
      }
    }
  }
}

// SwiGLU backward in gemm2's dgrad: the strip is dact (K = F columns); from
// the saved h (gate g, up u) and prob p: dh[:, f] = dact p u silu'(g),
// dh[:, F + f] = dact p silu(g) (bf16 [rows, 2K] in o.y), and
// dprob[row] += sum_f dact silu(g) u (fp32 atomics, one per row and strip:
// the four lanes of a quad reduce first). Every lane of the warp calls it.
template <int K, int W, int TW>
__device__ __forceinline__ void store_dglu(const Out &o, const float (&a)[W / 2], int grow, bool ok0,
                                           bool ok1, int col) {
  bf16_t *dh = static_cast<bf16_t *>(o.y);
  float dp[2] = {0.f, 0.f};
#pragma unroll
  for (int half = 0; half < 2; half++) {
    if (!(half ? ok1 : ok0)) continue;
    const long long rr = grow + 8 * half;
    const float p = o.prob ? o.prob[rr] : 1.f;
    const u32 *hg = reinterpret_cast<const u32 *>(o.h + rr * 2 * K + col);
    u32 *dg = reinterpret_cast<u32 *>(dh + rr * 2 * K + col);
#pragma unroll
    for (int j = 0; j < W / 8; j++) {
      if (K % TW == 0 || col + 8 * j < K) {
        const u32 g2 = hg[4 * j], u2 = hg[4 * j + K / 2];
        float dgv[2], duv[2];
#pragma unroll
        for (int q = 0; q < 2; q++) {
          const float g = q ? bf16_hi(g2) : bf16_lo(g2), u = q ? bf16_hi(u2) : bf16_lo(u2);
          const float da = a[4 * j + 2 * half + q], sg = __fdividef(1.f, 1.f + __expf(-g));
          const float sl = g * sg;
          dgv[q] = da * p * u * sg * (1.f + g * (1.f - sg));
          duv[q] = da * p * sl;
          dp[half] += da * sl * u;
        }
        dg[4 * j] = pack_bf16x2(dgv[0], dgv[1]);
        dg[4 * j + K / 2] = pack_bf16x2(duv[0], duv[1]);
      }
    }
  }
  if (o.dprob) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
      dp[half] += __shfl_xor_sync(MOEGEN_FULL_MASK, dp[half], 1);
      dp[half] += __shfl_xor_sync(MOEGEN_FULL_MASK, dp[half], 2);
    }
    if (threadIdx.x % 4 == 0) {
      if (ok0) atomicAdd(o.dprob + grow, dp[0]);
      if (ok1) atomicAdd(o.dprob + grow + 8, dp[1]);
    }
  }
}

// wgrad's dW_e rows i0, i0 + 8 (< N), columns col.. (< K): fp32 += with
// o.accumulate, else bf16 =. n0 is the strip's first column. Every lane of
// the warp calls it (the bf16 path swaps pairs within quads).
template <int N, int K, int W, int TW>
__device__ __forceinline__ void store_wgrad(const Out &o, const float (&a)[W / 2], int e, int i0,
                                            int col, int n0) {
  static_assert(W % 16 == 0, "column groups in pairs");
  const bool ok0 = i0 < N, ok1 = i0 + 8 < N;
  if (o.accumulate) {
    f32x2 *w0 = reinterpret_cast<f32x2 *>(static_cast<float *>(o.y) + ((long long)e * N + i0) * K + col);
    f32x2 *w1 = w0 + 4 * K; // 8 rows down, in f32x2 units
#pragma unroll
    for (int j = 0; j < W / 8; j++) {
      if (K % TW == 0 || col + 8 * j < K) {
        if (ok0) {
          f32x2 v = w0[4 * j];
          v.x += a[4 * j], v.y += a[4 * j + 1];
          w0[4 * j] = v;
        }
        if (ok1) {
          f32x2 v = w1[4 * j];
          v.x += a[4 * j + 2], v.y += a[4 * j + 3];
          w1[4 * j] = v;
        }
      }
    }
    return;
  }
  // Lanes q and q ^ 1 of a quad swap pairs so that each stores 8 bytes (q
  // even: 4 columns of group j, q odd: of group j + 1) and a quad writes 32
  // contiguous bytes (whole sectors when K % 16 == 0): column group jj,
  // columns 2 * (q & 2)..+3.
  const int q = threadIdx.x % 4, odd = q & 1;
  bf16_t *w = static_cast<bf16_t *>(o.y) + ((long long)e * N + i0) * K + n0 + 2 * (q & 2);
#pragma unroll
  for (int j = 0; j < W / 8; j += 2) {
    const int jj = j + odd;
    u32 v[2][2]; // [row half][lo, hi] to store
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const u32 lo = pack_bf16x2(a[4 * j + 2 * half], a[4 * j + 2 * half + 1]);
      const u32 hi = pack_bf16x2(a[4 * j + 4 + 2 * half], a[4 * j + 4 + 2 * half + 1]);
      const u32 got = __shfl_xor_sync(MOEGEN_FULL_MASK, odd ? lo : hi, 1);
      v[half][0] = odd ? got : lo;
      v[half][1] = odd ? hi : got;
    }
    if (K % TW == 0 || n0 + 8 * jj < K) {
      if (ok0) *reinterpret_cast<u32x2 *>(w + 8 * jj) = u32x2{v[0][0], v[0][1]};
      if (ok1) *reinterpret_cast<u32x2 *>(w + 8 * K + 8 * jj) = u32x2{v[1][0], v[1][1]};
    }
  }
}

// wgrad's bias grad db_e[m] for this CTA's dW rows, given each row's sum:
// = or += (o.accumulate; an expert with no rows is then left as it is).
__device__ __forceinline__ void store_db(const Out &o, int N, int e, int m, int rows, float v) {
  float *dst = static_cast<float *>(o.aux) + (long long)e * N + m;
  if (o.accumulate) {
    if (rows > 0) *dst += v;
  } else {
    *dst = v;
  }
}
} // namespace ggemm

#endif // MOEGEN_GEMM_COMMON

/* CPU test: the grouped GEMM's tile space (templates/gemm_common.cuh), the
 * code every GEMM kernel (sm_90a and portable) uses to turn a tile index
 * into an expert, a row tile and a column tile. build_tables runs on one
 * emulated warp (warp_emu.h) and is compared with host prefix sums, from
 * counts (negative ones count as 0) and from offsets; decode is compared,
 * tile by tile, with an independent enumeration of the documented order
 * (experts in order; groups of group_cols(mt) column tiles; a group's
 * tiles row tile by row tile, its column tiles fastest), which also proves
 * it a bijection onto the tiles; group_cols is checked against its model
 * recomputed here for every row-tile count up to 200, and one pick worked
 * by hand. Fresh random count sets each run (seed printed,
 * MOEGEN_TEST_SEED to repeat), E = 37 (not a power of two, two experts a
 * thread in build_tables), empty experts, T = 0 (no rows at all). */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "warp_emu.h"

thread_local emu_dim3 threadIdx;
emu_dim3 blockIdx, gridDim, blockDim = {32, 1, 1};
std::barrier<> *emu_warp;
unsigned long long emu_slots[32];
alignas(16) unsigned char emu_smem[1 << 20];

/* What templates/prelude.cuh gives the GEMM templates, on the host. */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
struct bf16_t {
  u16 bits;
};
#define MOEGEN_FULL_MASK 0xffffffffu
using std::max;
using std::min;
static inline float atomicAdd(float *p, float v) { return *p += v; } /* the epilogues: not run */

namespace ggemm {
constexpr int E = 37;
}
#define asm(...) /* smem_addr and pack_bf16x2 (inline PTX) are not under test */
#include "gemm_common.cuh"
#undef asm

static unsigned long long rng_state;
static unsigned rng(unsigned n) { /* splitmix64, uniform enough below 2^32 */
  unsigned long long z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (unsigned)((z ^ (z >> 31)) % n);
}

static int failures;
#define CHECK(cond, ...)                                                                          \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      if (failures++ < 20) {                                                                      \
        printf("FAIL %s:%d: ", __FILE__, __LINE__);                                               \
        printf(__VA_ARGS__);                                                                      \
        printf("\n");                                                                             \
      }                                                                                           \
    }                                                                                             \
  } while (0)

constexpr int E = ggemm::E;

/* build_tables<32, TBM> on one emulated warp: ts, rs [E + 1]. */
template <int TBM>
static void tables(const int *counts, const int *offsets, std::vector<int> &ts, std::vector<int> &rs) {
  int *t = reinterpret_cast<int *>(emu_smem), *r = t + (E + 1), *scratch = r + (E + 1);
  std::memset(emu_smem, 0xff, 8 * (E + 1) + 4 * 32);
  emu_run_warp([&] { ggemm::build_tables<32, TBM>(counts, offsets, t, r, scratch); });
  ts.assign(t, t + E + 1);
  rs.assign(r, r + E + 1);
}

/* One count set: build_tables (counts, then offsets) against host sums,
 * then decode over the whole tile space against the enumeration. */
template <int NT, int BN, int TBM, int BB> static void check_space(const std::vector<int> &counts) {
  std::vector<int> ts, rs, ets(E + 1), ers(E + 1), offsets(E + 1);
  for (int e = 0; e < E; e++) {
    const int m = counts[e] > 0 ? counts[e] : 0;
    ers[e + 1] = ers[e] + m;
    ets[e + 1] = ets[e] + (m + TBM - 1) / TBM;
    offsets[e + 1] = offsets[e] + m;
  }
  tables<TBM>(counts.data(), nullptr, ts, rs);
  CHECK(ts == ets && rs == ers, "build_tables from counts, TBM %d: tables differ from the host sums", TBM);
  std::vector<int> ots, ors;
  for (int &o : offsets) o += 1000; /* offsets need not start at 0 */
  tables<TBM>(nullptr, offsets.data(), ots, ors);
  CHECK(ots == ets && ors == offsets, "build_tables from offsets, TBM %d: tables differ", TBM);

  int t = 0; /* the documented order, enumerated */
  for (int e = 0; e < E; e++) {
    const int mt = ets[e + 1] - ets[e], gn = ggemm::group_cols<NT, TBM, BB>(mt);
    CHECK(gn >= 1 && gn <= NT && gn <= 16 && (gn & (gn - 1)) == 0 && (mt >= 4 || gn == 1),
          "group_cols<NT %d, TBM %d>(%d) = %d", NT, TBM, mt, gn);
    for (int g0 = 0; g0 < NT; g0 += gn)
      for (int m = 0; m < mt; m++)
        for (int n = g0; n < NT && n < g0 + gn; n++, t++) {
          const ggemm::Tile tl = ggemm::decode<NT, BN, TBM, BB>(t, ets.data(), ers.data());
          CHECK(tl.e == e && tl.m0 == m * TBM && tl.n0 == n * BN && tl.row0 == ers[e] &&
                    tl.rows == ers[e + 1] - ers[e],
                "decode<NT %d, BN %d, TBM %d>(%d): e %d m0 %d n0 %d, want e %d m0 %d n0 %d", NT, BN, TBM,
                t, tl.e, tl.m0, tl.n0, e, m * TBM, n * BN);
        }
  }
  CHECK(t == ets[E] * NT, "tile count %d, want %d", t, ets[E] * NT);
}

/* group_cols<NT, TBM, BB>(mt) for mt in [0, 200] against the model
 * recomputed here: 1 below 4 row tiles, else the power of two g <=
 * min(NT, 16) with the fewest bytes TBM mt ceil(NT / g) + BB NT ceil(mt g /
 * 16), the smallest g of a tie. */
template <int NT, int TBM, int BB> static void check_group_cols() {
  for (int mt = 0; mt <= 200; mt++) {
    int want = 1;
    if (mt >= 4) {
      long long best = -1;
      for (int g = 1; g <= NT && g <= 16; g *= 2) {
        const long long bytes = (long long)TBM * mt * ((NT + g - 1) / g) + (long long)BB * NT * ((mt * g + 15) / 16);
        if (best < 0 || bytes < best) best = bytes, want = g;
      }
    }
    const int got = ggemm::group_cols<NT, TBM, BB>(mt);
    CHECK(got == want, "group_cols<NT %d, TBM %d, BB %d>(%d) = %d, want %d", NT, TBM, BB, mt, got, want);
  }
}

/* Random counts: empty experts, short ones, ones of many row tiles. */
static std::vector<int> random_counts(int max_tiles) {
  std::vector<int> c(E);
  for (int &v : c) {
    const unsigned kind = rng(8);
    v = kind == 0 ? 0 : kind == 1 ? -(int)rng(5) : kind == 2 ? 1 + (int)rng(3) : (int)rng(max_tiles * 256 + 1);
  }
  return c;
}

int main() {
  const char *s = getenv("MOEGEN_TEST_SEED");
  rng_state = s ? strtoull(s, nullptr, 10) : (unsigned long long)time(nullptr);
  printf("seed %llu (MOEGEN_TEST_SEED to repeat)\n", rng_state);

  /* Worked by hand (bench/RESULTS.md run 20: Mixtral gemm2 at T = 16384):
   * NT 32, TBM 256, BB 128, mt 16: g = 1, 2, 4, 8, 16 cost 135168, 73728,
   * 49152, 49152, 73728 -> 4 (the first of the tie). */
  CHECK((ggemm::group_cols<32, 256, 128>(16) == 4), "group_cols<32, 256, 128>(16) = %d, want 4",
        ggemm::group_cols<32, 256, 128>(16));
  CHECK((ggemm::group_cols<32, 256, 128>(3) == 1), "below 4 row tiles: 1");

  check_group_cols<1, 128, 128>();
  check_group_cols<3, 256, 192>();
  check_group_cols<8, 256, 128>();
  check_group_cols<22, 256, 192>();
  check_group_cols<32, 256, 128>();
  check_group_cols<56, 128, 256>();
  check_space<8, 128, 128, 128>(std::vector<int>(E, 0)); /* T = 0: no tiles */
  for (int i = 0; i < 40; i++) {
    const int max_tiles = i % 2 ? 3 : 40;
    check_space<1, 128, 128, 128>(random_counts(max_tiles));
    check_space<3, 192, 256, 192>(random_counts(max_tiles));
    check_space<8, 64, 256, 128>(random_counts(max_tiles)); /* SwiGLU: 64 output columns, 128 B rows */
    check_space<22, 192, 256, 192>(random_counts(max_tiles));
    check_space<32, 128, 128, 128>(random_counts(max_tiles));
  }
  printf(failures ? "FAIL (%d failures)\n" : "PASS\n", failures);
  return failures ? 1 : 0;
}

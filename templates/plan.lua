-- plan.lua: derives every kernel's launch shape from the config.
-- Pure: reads the globals cfg and opt, returns the plan table. Each choice
-- is a named compile-time parameter with its reason next to it.

local function pow2_floor(n)
  local p = 1
  while p * 2 <= n do p = p * 2 end
  return p
end

local function pow2_ceil(n)
  local p = 1
  while p < n do p = p * 2 end
  return p
end

-- Largest power of two <= cap that divides every argument.
local function pow2_dividing(cap, ...)
  local p = cap
  while p > 1 do
    local ok = true
    for _, n in ipairs({ ... }) do
      if n % p ~= 0 then ok = false end
    end
    if ok then return p end
    p = p // 2
  end
  return 1
end

local function align16(n) return (n + 15) // 16 * 16 end

local dtype_bytes = abi.dtype_bytes
-- moegen/types.h MOEGEN_LIMITS, which config validation checks: the
-- layouts below fail only where validation let a config through that it
-- should not have.
local MAX_GROUPS, MAX_PER_LANE = abi.limits.max_groups, abi.limits.max_experts_per_lane
local dtype_ctype = { fp32 = "float", bf16 = "bf16_t", fp16 = "fp16_t" }

-- Router forward (templates/router.cu.lt). A token is served by `lanes`
-- consecutive lanes of a warp; each lane owns `per_lane` consecutive
-- experts. Groups of experts map to aligned segments of `seg` lanes, so a
-- group's top-k is a segmented warp reduction.
--
-- Selection is by threshold and rank (the kernel's header says how): its
-- cost is the scores plus a few compares per expert and a short ranking of
-- ~11 candidates, far less than the K argmax passes it replaced
-- (bench/PLAN_NOTES.md §router; bench/HISTORY.md runs 9, 16-18).
--
-- Two kernels of one template: the main one at ~TARGET_PER_LANE experts a
-- lane (fewer lanes a token: the cross-lane steps are shared by more
-- experts) and, for small T (runtime/ops_router.c: while it needs at most
-- max_warps_per_sm warps an SM, below), one at ~TARGET_PER_LANE_SMALL
-- (32 lanes where E allows: the shortest chain per token). The small one
-- loads 8-byte vectors (Qwen3 and gpt-oss: 32 lanes of 4 experts, not 16 of
-- 8) and, at one token a warp with at most PASSES_MAX_PER_LANE experts a
-- lane and PASSES_MAX_PICKS picks, selects by passes of a warp-wide max
-- (redux.sync; the kernel's header says how): a chain of ~10 dependent
-- steps a pick instead of the threshold's bound, prefix, list and rank.
local TARGET_PER_LANE, TARGET_PER_LANE_SMALL = 16, 4
local VEC_BYTES, VEC_BYTES_SMALL = 16, 8
local PASSES_MAX_PER_LANE, PASSES_MAX_PICKS = 8, 16
-- The small kernel serves a call while it needs at most this many warps an
-- SM (runtime/ops_router.c): one a scheduler for the threshold kernel; two
-- for the passes kernel, which still beat the main kernel at Qwen3
-- T = 1024 (7.75 warps an SM) and lost to it at T = 4096
-- (bench/PLAN_NOTES.md §router; bench/HISTORY.md run 21).
local SMALL_WARPS_PER_SM, PASSES_WARPS_PER_SM = 4, 8
-- Shared memory of a router block at most: every arch's per-block limit,
-- and 4 blocks an SM on Hopper.
local ROUTER_SMEM_TARGET = 48 * 1024

local function router_plan(target, vec_bytes, small)
  local E, K = cfg.experts, cfg.topk
  local grouped = cfg.groups > 1 or cfg.group_topk > 1
  local ngroups = grouped and cfg.groups or 1
  local gsize = E // ngroups
  local seg, lanes, per_lane
  if grouped then
    if ngroups > MAX_GROUPS then
      error("router: groups = " .. ngroups .. " is more than the " .. MAX_GROUPS .. " the router kernel supports")
    end
    local slots = pow2_ceil(ngroups)
    seg = 1
    while seg * 2 * slots <= 32 and gsize % (seg * 2) == 0 and gsize // (seg * 2) >= target do
      seg = seg * 2
    end
    lanes = slots * seg
    per_lane = gsize // seg
  else
    lanes = math.max(1, math.min(32, pow2_floor(E // target)))
    local align = pow2_dividing(math.max(1, vec_bytes // dtype_bytes[cfg.logits_dtype]), E)
    per_lane = (E + lanes - 1) // lanes
    per_lane = (per_lane + align - 1) // align * align
    lanes = math.min(lanes, pow2_ceil((E + per_lane - 1) // per_lane)) -- no lanes without experts
    seg = lanes
  end
  if per_lane > MAX_PER_LANE then
    error("router: " .. E .. " experts need " .. per_lane .. " per lane (max " .. MAX_PER_LANE .. ")")
  end
  local esize = dtype_bytes[cfg.logits_dtype]
  local threads = per_lane > 32 and 128 or 256
  local picks = cfg.quantile_balancing and K + 1 or K
  -- depth D and quota Q of the bound tau. Grouped: a lane keeps its share of
  -- the group's top KG (the group score). Ungrouped: tau is the Q-th largest
  -- of the lanes' D-th values, Q = ceil(picks / D); Q near lanes / 2 keeps
  -- the candidates few (simulated: bench/PLAN_NOTES.md §router).
  local group_k = grouped and K // cfg.group_topk or 0
  local depth, quota
  if grouped then
    depth, quota = math.min(group_k, per_lane), 0
  else
    depth = math.min(per_lane, picks, math.max(1, (2 * picks + lanes - 1) // lanes))
    quota = (picks + depth - 1) // depth
  end
  -- cap: candidates a token may list; a warp with a token over it (ties:
  -- n > 32 in 2e-5 of DeepSeek-V3's normal tokens) picks by argmax passes.
  -- Never more than E (n <= E).
  local cap = math.min(2 * picks + 16, E)
  -- slice: a lane's floats in a shared row, an odd number of 16-byte units,
  -- so the 8 lanes of a quarter warp hit 8 different bank quads.
  local slice = (per_lane + 3) // 4 * 4
  if (slice // 4) % 2 == 0 then slice = slice + 4 end
  local row = lanes * slice
  -- A block holds a shared slot per token: at most ROUTER_SMEM_TARGET bytes
  -- of them, halving the block (E = 28, K = 28 at one lane a token needed
  -- 232 KiB for 256 tokens: over every arch's limit).
  local slot_bytes = align16(4 * row + 8 * cap + 8 * picks + 4 * ((E + 31) // 32))
  local fixed = align16(4 * E)
  while threads > 32 and fixed + threads // lanes * slot_bytes > ROUTER_SMEM_TARGET do
    threads = threads // 2
  end
  local tokens_per_block = threads // lanes
  local passes = small and lanes == 32 and per_lane <= PASSES_MAX_PER_LANE and picks <= PASSES_MAX_PICKS
  -- The passes kernel sorts a lane's V pairs once by Batcher's odd-even
  -- merge network (19 compare-exchanges for 8, 5 for 4; any V): {a, b}
  -- pairs, 0-based, in order.
  local sort_pairs = {}
  local pp = passes and 1 or per_lane
  while pp < per_lane do
    local k = pp
    while k >= 1 do
      local j = k % pp
      while j + k < per_lane do
        for i = 0, math.min(k - 1, per_lane - j - k - 1) do
          if (i + j) // (2 * pp) == (i + j + k) // (2 * pp) then
            sort_pairs[#sort_pairs + 1] = { i + j, i + j + k }
          end
        end
        j = j + 2 * k
      end
      k = k // 2
    end
    pp = pp * 2
  end
  local p = {
    experts = E,
    topk = K,
    passes = passes,
    sort_pairs = sort_pairs,
    max_warps_per_sm = small and (passes and PASSES_WARPS_PER_SM or SMALL_WARPS_PER_SM) or 0,
    grouped = grouped,
    ngroups = ngroups,
    gsize = grouped and gsize or E,
    group_k = group_k,
    group_topk = grouped and cfg.group_topk or 0,
    lanes = lanes,
    seg = seg,
    per_lane = per_lane,
    depth = depth,
    quota = quota,
    cap = cap,
    slice = slice,
    -- vector widths (elements) of each access; all divide E and per_lane
    logit_vec = pow2_dividing(16 // esize, E, per_lane),
    map_vec = pow2_dividing(16, E, per_lane),
    inter_vec = pow2_dividing(4, E, per_lane),
    slice_vec = pow2_dividing(4, per_lane),
    threads = threads,
    tokens_per_block = tokens_per_block,
    -- the expert histogram, one slot per token
    smem_bytes = fixed + tokens_per_block * slot_bytes,
    logits_type = dtype_ctype[cfg.logits_dtype],
    logits_dtype = abi.dtype[cfg.logits_dtype],
    has_bias = cfg.expert_bias and 1 or 0,
    qb = cfg.quantile_balancing and 1 or 0,
  }
  return p
end

-- Streaming row layout of the router backward and the aux-loss score
-- kernels: a token's E experts over `lanes` lanes of a warp, `per_lane`
-- consecutive experts each. per_lane is a multiple of 8 so a lane owns whole
-- bitmap bytes; the target of 8 makes one 16-byte access of bf16 grads and
-- keeps ~56 bytes per lane in flight. The row lives in registers (<= MAX_PER_LANE).
-- Dense rows: a sparse backward (picks only) saved no time (bench/HISTORY.md
-- run 18 call 3; bench/PLAN_NOTES.md §router-bwd).
local ROW_TARGET = 8

local function row_plan(E, esize)
  local lanes = math.max(1, math.min(32, pow2_floor(E // ROW_TARGET)))
  local per_lane = (E + lanes - 1) // lanes
  per_lane = (per_lane + 7) // 8 * 8
  if per_lane > MAX_PER_LANE then
    error("router backward: " .. E .. " experts need " .. per_lane .. " per lane (max " .. MAX_PER_LANE .. ")")
  end
  local threads = 256
  return {
    experts = E,
    topk = cfg.topk,
    lanes = lanes,
    per_lane = per_lane,
    -- vector widths (elements) of each access; all divide E and per_lane
    grad_vec = pow2_dividing(16 // esize, E, per_lane), -- logits dtype
    f32_vec = pow2_dividing(4, E, per_lane),            -- fp32 rows
    map_vec = pow2_dividing(16, E, per_lane),           -- bytemap rows
    threads = threads,
    tokens_per_block = threads // lanes,
    logits_type = dtype_ctype[cfg.logits_dtype],
    logits_dtype = abi.dtype[cfg.logits_dtype],
  }
end

local function router_bwd_plan()
  local p = row_plan(cfg.experts, dtype_bytes[cfg.logits_dtype])
  -- router_bwd = recompute: the kernel reads a token's logits (2 bytes an
  -- expert in bf16) instead of the fp32 intermediate the forward would have
  -- written (4 bytes there, 4 here), and recomputes that state from them;
  -- issue 32 item 5 (Qwen3 T = 16384: ~23 MB moved instead of ~38 MB).
  p.recompute = abi.router_bwd[cfg.router_bwd]
  return p
end

-- Aux loss: the score kernels share the router backward's row layout; the
-- loss is a flat reduction over [R, C] with a fixed grid cap (so the sum's
-- order does not depend on the device), partials in the caller's workspace.
local function aux_plan()
  local p = row_plan(cfg.experts, dtype_bytes[cfg.logits_dtype])
  p.loss_threads = 256
  p.loss_unroll = 8      -- loads in flight per thread
  p.loss_max_blocks = 1024 -- partial sums (the workspace holds one float each)
  return p
end

-- Grouped GEMM forward on Hopper (templates/grouped_gemm_sm90.cu.lt):
-- Y_e[m_e, N] = X_e[m_e, K] W_e[N, K]^T per expert, bf16 in and out, fp32
-- accumulation. One CTA per SM (persistent), three warpgroups: a TMA
-- producer and two wgmma consumers, each owning 64 rows of a BM x BN tile.
--
--  * 128 x 256 is the largest tile whose 64 x 256 fp32 accumulator (128
--    registers a thread) fits a consumer; smaller tiles would need more L2
--    bandwidth than Hopper has. As many stages as fit (GEMM_MAX_STAGES at
--    most) keep more loads in flight than the L2 / HBM latency.
--  * tiles are numbered expert-major, then N tile, then M tile, and taken in
--    that order by ticket (grouped_gemm_sm90.cu.lt next_tile), so the CTAs
--    that run together share each W tile (read from HBM once) and X_e.
--  * small T is weight-bound: a consumer whose 64 rows are all past the
--    expert's end skips its MMAs, so a small expert's MMAs stay hidden
--    under the weight stream.
--  * BN is the candidate with the fewest padded columns (gpt-oss N = 2880 and
--    5760 are multiples of 192, not 256); the producer / consumer register
--    split is the template's (grouped_gemm_sm90.cu.lt PRODUCER_REGS,
--    CONSUMER_REGS).
--  * tall tiles, 256 x 128 (gemm2) or 256 x 192 (the others where 192 moves
--    fewer bytes, gemm_bn): the CTAs that read a weight tile drift apart and
--    each fetches it from HBM; a 256-row tile reads each weight tile for
--    twice the rows inside one CTA, on the same smem bytes a step.
--    A call takes the tall kernels only with max_rows >= GEMM_TALL_ROWS * E
--    (below 256 rows per expert the second consumer would idle); 512, not
--    256, because at 256 rows an expert (Qwen3 T = 4096) the tall gemm2 ran
--    slower.
--  Napkin math, the ncu diagnosis and the measurements: bench/PLAN_NOTES.md
--  §gemm-sm90; bench/HISTORY.md runs 6 and 7.
local GEMM_SMEM_LIMIT = 232448 -- opt-in dynamic shared memory per CTA (sm_90)
local GEMM_BM, GEMM_BK, GEMM_MAX_STAGES = 128, 64, 6
local GEMM_TALL_ROWS = 512
-- L2 hints (templates/grouped_gemm_sm90.cu.lt l2_policies), for the 50 MB
-- L2 of an H100 / H200: the X (dY) tiles shared by the CTAs in flight are
-- kept (evict_last) when they take at most GEMM_L2_KEEP bytes; both
-- operands' shared sets fit together below GEMM_L2_FIT. Chosen from three
-- variants measured in one call (bench/HISTORY.md run 7; bench/PLAN_NOTES.md
-- §gemm-sm90).
local GEMM_L2_KEEP, GEMM_L2_FIT = 24 * 1024 * 1024, 32 * 1024 * 1024

-- Shared memory of one GEMM kernel: per-expert tables (tile and row starts,
-- E + 1 ints each, plus 32 ints of scan scratch), the barriers, 1 KiB to
-- align the tiles to the 128B-swizzle atom, then the stages.
local function gemm_smem(E, bn, stages, bm)
  local tables = (8 * (E + 1) + 4 * 32 + 15) // 16 * 16
  return tables + 16 * stages + 1024 + stages * ((bm or GEMM_BM) + bn) * GEMM_BK * 2
end

-- The tile width of an N-column output: for 128-row tiles the candidate
-- with the fewest padded columns. For gemm1's 256-row forward tiles
-- (wide = true) the one with the fewest operand bytes per k step over the
-- row's tiles, ceil(N / bn) * (bm + bn), of 192 (two m64n192 accumulators,
-- 192 registers a consumer thread) and 128: ncu showed that kernel bound
-- by L2 traffic, and 192 cuts those bytes. wide is set for gemm1, the
-- SwiGLU forward and the tall dgrad / dgrad + SwiGLU kernels, where it
-- measured faster; gemm2's forward keeps 128, where 192 measured slower.
-- Predictions and measurements: bench/PLAN_NOTES.md §gemm-sm90 (gemm_bn);
-- bench/HISTORY.md runs 10, 11 and 15.
local function gemm_bn(N, bm, wide)
  local bn, cost
  for _, cand in ipairs(bm == 256 and (wide and { 192, 128 } or { 128 }) or { 256, 192, 128 }) do
    local tiles = (N + cand - 1) // cand
    local c = bm == 256 and tiles * (bm + cand) or tiles * cand - N
    if not bn or c < cost then bn, cost = cand, c end
  end
  return bn
end

local function gemm_kernel_plan(N, K, E, bm, wide)
  bm = bm or GEMM_BM
  local bn = gemm_bn(N, bm, wide)
  local stages = GEMM_MAX_STAGES
  while gemm_smem(E, bn, stages, bm) > GEMM_SMEM_LIMIT do stages = stages - 1 end
  return {
    n = N, k = K,
    bm = bm, bn = bn, bk = GEMM_BK,
    stages = stages,
    threads = 384,          -- producer + 2 consumer warpgroups
    smem_bytes = gemm_smem(E, bn, stages, bm),
  }
end

-- Backward GEMMs and the SwiGLU forward (templates/grouped_gemm_bwd_sm90.cu.lt),
-- same machinery and tile as the forward. n and k are the forward GEMM's N
-- and K; bn tiles the k columns of the output of both backward kernels:
--  * dgrad dX_e[m_e, k] = dY_e[m_e, n] W_e[n, k]: reduction n, W is read
--    k-contiguous (MN-major B); rows tiled by bm as in the forward.
--  * wgrad dW_e[n, k] = dY_e^T X_e: bm tiles n, the reduction is the expert's
--    rows (run time); both operands MN-major. 512 more bytes of shared
--    memory hold the bias-grad partial sums of the two consumers.
--  * glu (gemm1 only): the forward with gate columns [0, F) and up columns
--    [F, 2F) of one tile side by side (bn / 2 of each), act = silu(gate) * up.
--    Its plan is gemm1's (gemm_kernel_plan(2F, H, ...)): the same bn
--    minimizes the padded act columns (128 rows) and the operand bytes
--    (256 rows, 192 or 128 wide). The tall 256 x 192 SwiGLU tile holds 192
--    accumulators a consumer thread live through store_glu; it takes
--    CONSUMER_REGS and stores row by row (bench/PLAN_NOTES.md §gemm-sm90;
--    bench/HISTORY.md run 15).
local GEMM_DB_BYTES = 512
-- wgrad stores its bf16 dW tile through shared memory with TMA, 64
-- columns at a time: each consumer stages its 64 rows x bn columns as bn / 64
-- chunks of one dW-map box (64 rows x 64 bf16 = 8 KiB) through a ring of
-- `boxes` such buffers after the stages (boxes divides bn / 64; a chunk
-- reuses a buffer once the TMA store of the chunk `boxes` before it has read
-- it). Staging the whole 64 x bn at once cost a pipeline stage, which the
-- long reductions need (bench/PLAN_NOTES.md §gemm-sm90; bench/HISTORY.md
-- run 21).
local WGRAD_BOX_BYTES = 64 * 64 * 2
local function wgrad_staging_bytes(boxes) return 2 * boxes * WGRAD_BOX_BYTES end

local function gemm_stages(E, bn, extra, bm)
  local stages = GEMM_MAX_STAGES
  while gemm_smem(E, bn, stages, bm) + extra > GEMM_SMEM_LIMIT do stages = stages - 1 end
  return stages
end

-- bm: 128, or 256 for the tall kernels (dgrad only; their tile width by
-- operand bytes, as gemm1's: gemm_bn). wgrad: the stages come first (as
-- many as without the dW staging), then the most staging boxes a consumer
-- (stg_boxes, a divisor of bn / 64) that fit beside them; only if not even
-- one box fits does a stage go.
local function gemm_bwd_kernel_plan(N, K, E, extra, bm, wgrad)
  local p = gemm_kernel_plan(K, N, E, bm, true) -- bn picked for the k output columns
  p.n, p.k = N, K
  p.stages = gemm_stages(E, p.bn, extra, p.bm)
  p.stg_boxes = 0
  if wgrad then
    local chunks = p.bn // 64
    while true do
      local room = GEMM_SMEM_LIMIT - gemm_smem(E, p.bn, p.stages, p.bm) - extra
      for boxes = chunks, 1, -1 do
        if chunks % boxes == 0 and wgrad_staging_bytes(boxes) <= room then
          p.stg_boxes = boxes
          break
        end
      end
      if p.stg_boxes > 0 then break end
      if p.stages <= 2 then error("gemm wgrad: no room for the dW staging beside 2 stages (E = " .. E .. ")") end
      p.stages = p.stages - 1
    end
    extra = extra + wgrad_staging_bytes(p.stg_boxes)
  end
  p.smem_bytes = gemm_smem(E, p.bn, p.stages, p.bm) + extra
  return p
end

-- The fp8_block forward (templates/grouped_gemm_fp8_sm90.cu.lt), planned
-- only for that recipe: the bf16 forward's machinery with one 128-wide K
-- block (128 e4m3 = 128 bytes, the bf16 stage's 64 columns) a stage, so the
-- stage bytes and gemm_smem are the bf16 kernel's. 128 x 128 tiles (the
-- SwiGLU one 64 gate + 64 up columns): a consumer holds the block's
-- accumulator and the promoted fp32 sum, 2 x 64 registers a thread; a
-- 256-wide tile would need 256. No tall tiles yet. H and F are multiples
-- of the block (config validation), so no column group straddles two.
local GEMM_FP8_QB = abi.limits.fp8_block
local function gemm_fp8_kernel_plan(N, K, E)
  local bn = 128
  local stages = gemm_stages(E, bn, 0)
  return {
    n = N, k = K,
    bm = GEMM_BM, bn = bn, bk = GEMM_FP8_QB,
    stages = stages,
    threads = 384,          -- producer + 2 consumer warpgroups
    smem_bytes = gemm_smem(E, bn, stages),
  }
end

-- The portable grouped GEMM (templates/grouped_gemm_mma.cu.lt) for every
-- arch from sm_80 on that is not sm_90a (A100, L40S, plain sm_90, sm_100):
-- mma.sync m16n8k16 bf16 and cp.async, no TMA or wgmma. 256 threads (8
-- warps of 64 x bn / 4), tiles of 128 rows x bn columns x 32, MMA_STAGES
-- cp.async stages of (128 + bn) * 64 bytes.
--  * bn = 256 (64 x 64 warp tiles) unless 128 pads fewer output columns
--    (gpt-oss's 2880): 1.5x less shared-memory traffic a FLOP than 64 x 32
--    warp tiles. L2 hints and more stages measured no gain (the bound is in
--    the SM), so neither is planned.
--  * bn = 256 takes one CTA (8 warps) an SM (its 128 accumulators); bn = 128
--    two, except the SwiGLU epilogues (one).
--  * no tall tiles (tall_rows_per_expert = 0).
--  Napkin math (A100), register counts and the H200 measurements:
--  bench/PLAN_NOTES.md §gemm-mma; bench/HISTORY.md run 12.
local MMA_BM, MMA_BK, MMA_MAX_STAGES, MMA_THREADS = 128, 32, 4, 256
local MMA_DB_BYTES = 512 -- wgrad: the bias-grad partial sums of 128 columns
-- Opt-in shared memory per CTA: 99 KiB on sm_86 / sm_89 / sm_120 (and as a
-- default), 163 KiB on sm_80 / sm_87, 227 KiB on sm_90 / sm_100.
local function mma_smem_limit(sm)
  if sm == 80 or sm == 87 then return 166912 end
  if sm == 90 or sm == 100 or sm == 103 then return 232448 end
  return 101376
end

-- C output columns, tiles of tw(bn) columns: the bn of the fewest padded ones (256 on ties).
local function mma_bn(C, tw)
  local best, waste
  for _, bn in ipairs({ 256, 128 }) do
    local w = (C + tw(bn) - 1) // tw(bn) * tw(bn) - C
    if not best or w < waste then best, waste = bn, w end
  end
  return best
end

local function mma_kernel_plan(N, K, E, sm, C, glu, extra)
  local tables = (8 * (E + 1) + 4 * 32 + 15) // 16 * 16
  local bn = mma_bn(C, function(b) return glu and b // 2 or b end)
  local function smem(st) return tables + (extra or 0) + st * (MMA_BM + bn) * MMA_BK * 2 end
  local stages = MMA_MAX_STAGES
  while stages > 2 and smem(stages) > mma_smem_limit(sm) do stages = stages - 1 end
  return {
    n = N, k = K,
    bm = MMA_BM, bn = bn, bk = MMA_BK,
    stages = stages,
    threads = MMA_THREADS,
    smem_bytes = smem(stages),
  }
end

-- A kernel the module does not have (the portable path's tall tiles; every
-- kernel where there are none): threads = 0 is moegen/abi.def's absent rule.
local NO_KERNEL = { n = 0, k = 0, bm = 0, bn = 0, bk = 0, stages = 0, threads = 0, smem_bytes = 0 }

local function gemm_plan()
  local E, H, F = cfg.experts, cfg.hidden, cfg.ffn
  -- TMA needs 16-byte row strides (K % 8) and the epilogue stores column
  -- pairs of 16-byte aligned rows (N % 8); cp.async moves 16-byte chunks.
  local sm = tonumber(opt.arch:match("^sm_(%d+)")) or 0
  local shapes_ok = H % 8 == 0 and F % 8 == 0
  if shapes_ok and opt.arch ~= "sm_90a" and sm >= 80 then
    return {
      experts = E,
      portable = 1,
      gemm1 = mma_kernel_plan(2 * F, H, E, sm, 2 * F),
      gemm2 = mma_kernel_plan(H, F, E, sm, H),
      gemm1_tall = NO_KERNEL,
      gemm2_tall = NO_KERNEL,
      tall_rows_per_expert = 0,
      gemm1_dgrad = mma_kernel_plan(2 * F, H, E, sm, H),
      gemm2_dgrad = mma_kernel_plan(H, F, E, sm, F),
      gemm1_wgrad = mma_kernel_plan(2 * F, H, E, sm, H, false, MMA_DB_BYTES),
      gemm2_wgrad = mma_kernel_plan(H, F, E, sm, F, false, MMA_DB_BYTES),
      gemm1_glu = mma_kernel_plan(2 * F, H, E, sm, F, true),
      gemm1_dgrad_tall = NO_KERNEL,
      gemm2_dgrad_tall = NO_KERNEL,
      gemm1_glu_tall = NO_KERNEL,
      gemm1_fp8 = NO_KERNEL, -- fp8_block on the portable path: not yet (the ops say NOT_SUPPORTED)
      gemm2_fp8 = NO_KERNEL,
      gemm1_glu_fp8 = NO_KERNEL,
    }
  end
  if not (opt.arch == "sm_90a" and shapes_ok) then -- no GEMM kernels: every plan NO_KERNEL
    local p = { experts = E, portable = 0, tall_rows_per_expert = 0 }
    for _, k in pairs(abi.kernels) do
      local member = k.plan:match("^gemm%.(.+)$")
      if member then p[member] = NO_KERNEL end
    end
    return p
  end
  local fp8 = cfg.recipe == "fp8_block"
  local function fp8_plan(N, K) return fp8 and gemm_fp8_kernel_plan(N, K, E) or NO_KERNEL end
  return {
    experts = E,
    portable = 0,
    gemm1 = gemm_kernel_plan(2 * F, H, E),
    gemm2 = gemm_kernel_plan(H, F, E),
    gemm1_tall = gemm_kernel_plan(2 * F, H, E, 256, true),
    gemm2_tall = gemm_kernel_plan(H, F, E, 256),
    tall_rows_per_expert = GEMM_TALL_ROWS,
    l2_keep_bytes = GEMM_L2_KEEP,
    l2_fit_bytes = GEMM_L2_FIT,
    gemm1_dgrad = gemm_bwd_kernel_plan(2 * F, H, E, 0),
    gemm2_dgrad = gemm_bwd_kernel_plan(H, F, E, 0),
    gemm1_wgrad = gemm_bwd_kernel_plan(2 * F, H, E, GEMM_DB_BYTES, nil, true),
    gemm2_wgrad = gemm_bwd_kernel_plan(H, F, E, GEMM_DB_BYTES, nil, true),
    gemm1_glu = gemm_kernel_plan(2 * F, H, E),
    gemm1_dgrad_tall = gemm_bwd_kernel_plan(2 * F, H, E, 0, 256),
    gemm2_dgrad_tall = gemm_bwd_kernel_plan(H, F, E, 0, 256),
    gemm1_glu_tall = gemm_kernel_plan(2 * F, H, E, 256, true),
    gemm1_fp8 = fp8_plan(2 * F, H),
    gemm2_fp8 = fp8_plan(H, F),
    gemm1_glu_fp8 = fp8_plan(2 * F, H),
  }
end

-- Token permutation (templates/permute.cu.lt): an index phase (per-tile
-- histograms, then counts + capacity + padded offsets + every route's row)
-- and row kernels that move 16-byte vectors.
--
--  * row kernels: one copy group per token (no persistent loop), so retiring
--    and starting blocks overlap; every copy variant tried sat at the same
--    rate for this 1:8 read:write mix.
--  * index phase: three kernels, launch-bound and small beside the copy; one
--    kernel fewer would need a grid-wide barrier (offsets need every tile's
--    counts), which is unsafe with concurrent streams.
--  * no atomics on the data path: ranks come from per-tile bitmasks in
--    shared memory (popcounts), so rows are deterministic.
--  Napkin math and the copy measurements: bench/PLAN_NOTES.md §permute;
--  bench/HISTORY.md runs 6 and 7.
local function permute_plan()
  local E, K, H = cfg.experts, cfg.topk, cfg.hidden
  local esize = dtype_bytes[cfg.dtype] or 2
  local ok = H % 8 == 0
  local nv = ok and H * esize // 16 or 1
  -- tile: the rank kernel's shared memory is E * (12 + 6 * TILE / 32) bytes
  local tile = 512
  while tile > 32 and E * (12 + 6 * tile // 32) > 44 * 1024 do tile = tile // 2 end
  -- copy group: the fewest threads per row with <= 8 vectors each
  local cg = 1
  while cg < 128 and (nv + cg - 1) // cg > 8 do cg = cg * 2 end
  -- combine: a thread owns combine_vecs vectors of a slab and loads each
  -- from its K rows: K * combine_vecs <= COMBINE_LOADS 16-byte loads in
  -- flight (128 B for K in {1, 2, 4, 8}; only K > 8 has more). Launch bounds
  -- of GATHER_MIN_BLOCKS = 3 blocks of 256 per SM cap the kernel at 80
  -- registers (more loads would spill) and keep <= 96 KB of loads in flight
  -- per SM against the ~32 KB that 4.3 TB/s x ~1 us needs. Slabs of consecutive output vectors, walked
  -- grid-stride by one wave, read contiguous pieces of each row at the same
  -- time as their neighbours (a copy's pattern); rows are read once, with
  -- .cs (evict-first) loads. Predictions: bench/PLAN_NOTES.md §permute;
  -- measured in bench/HISTORY.md run 6.
  local COMBINE_LOADS, GATHER_MIN_BLOCKS = 8, 3
  return {
    experts = E,
    topk = K,
    hidden = H,
    row_vecs = nv,
    tile_tokens = ok and tile or 0, -- block sizes 0: no permute kernels (abi.def)
    map_vec = pow2_dividing(16, E),
    copy_threads = ok and 256 or 0,
    copy_group = cg,
    copy_iters = (nv + cg - 1) // cg,
    gather_threads = ok and 256 or 0,
    gather_group = math.min(32, pow2_ceil(nv)),
    gather_min_blocks = GATHER_MIN_BLOCKS,
    combine_vecs = math.max(1, COMBINE_LOADS // K),
    zero_chunk = 16,
    max_chunks = 2048,
    -- fp8_block: the rows kernel that writes FP8 rows + 1x128 scales
    -- (templates/permute_fp8.cu.lt), a warp a token (4 values a lane of
    -- each 128-value tile: the tile's amax is one warp reduction)
    fp8_threads = (ok and cfg.recipe == "fp8_block") and 256 or 0,
  }
end

-- The precision recipe (SPEC.md 5b; config validation checked the
-- combinations): what every FP8 template and op tests. fp8_tensorwise's
-- gradients are E5M2 in the hybrid format (TE's HYBRID: their range needs
-- it, the forward tensors' precision E4M3), E4M3 otherwise; fp8_block is
-- E4M3 throughout. Power-of-two scales (fp8_block's default, as TE's
-- Float8BlockScaling) make the dequantization exact; fp8_tensorwise's scale
-- is FP8_MAX / amax as it is, as TE's current scaling.
local function quant_plan()
  local recipe = abi.recipe[cfg.recipe]
  local hybrid = recipe == abi.recipe.fp8_tensorwise and cfg.fp8_grad_format == "hybrid"
  local fp8, block = recipe ~= abi.recipe.bf16, recipe == abi.recipe.fp8_block
  -- The quantize kernels (templates/quant.cu.lt) are memory-bound streams:
  -- 256 threads a block everywhere; the weight kernel takes one 128 x 128
  -- tile a block (64 elements a thread), the row kernel a row a warp, and
  -- the two tensorwise kernels stride over the tensor with at most
  -- QUANT_MAX_BLOCKS blocks (about 8 of 256 threads an SM of an H100's 132:
  -- a full wave, and one amax atomic a block).
  local QUANT_THREADS, QUANT_MAX_BLOCKS = 256, 1024
  return {
    recipe = recipe,
    grad_format = hybrid and abi.fp8_format.e5m2 or abi.fp8_format.e4m3,
    scale_pow2 = (block and cfg.fp8_scale == "pow2") and 1 or 0,
    weight_threads = fp8 and QUANT_THREADS or 0,
    rows_threads = block and QUANT_THREADS or 0,
    tensor_threads = (fp8 and not block) and QUANT_THREADS or 0,
    max_blocks = (fp8 and not block) and QUANT_MAX_BLOCKS or 0,
  }
end

-- The small-T kernel, or threads = 0 (no kernel) where it would be the same shape.
local function router_small_plan(main)
  local p = router_plan(TARGET_PER_LANE_SMALL, VEC_BYTES_SMALL, true)
  if p.lanes == main.lanes and not p.passes then p.threads = 0 end
  return p
end

local router_main = router_plan(TARGET_PER_LANE, VEC_BYTES, false)
return {
  router = router_main, router_small = router_small_plan(router_main), router_bwd = router_bwd_plan(),
  aux = aux_plan(), gemm = gemm_plan(), permute = permute_plan(), quant = quant_plan(),
}

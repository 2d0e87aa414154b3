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

local dtype_bytes = { fp32 = 4, bf16 = 2, fp16 = 2 }
local dtype_ctype = { fp32 = "float", bf16 = "bf16_t", fp16 = "fp16_t" }

-- Router forward. A token is served by `lanes` consecutive lanes of a warp;
-- each lane owns `per_lane` consecutive experts. Groups of experts map to
-- aligned segments of `seg` lanes, so a group's top-k is a segmented warp
-- reduction. Target ~16 experts per lane: enough work per lane to amortize
-- the shuffles, few enough registers to avoid spills.
local TARGET_PER_LANE = 16

local function router_plan()
  local E, K = cfg.experts, cfg.topk
  local grouped = cfg.groups > 1 or cfg.group_topk > 1
  local ngroups = grouped and cfg.groups or 1
  local gsize = E // ngroups
  local seg, lanes, per_lane
  if grouped then
    if ngroups > 32 then
      error("router: groups = " .. ngroups .. " is more than the 32 the router kernel supports")
    end
    local slots = pow2_ceil(ngroups)
    seg = 1
    while seg * 2 * slots <= 32 and gsize % (seg * 2) == 0 and gsize // (seg * 2) >= TARGET_PER_LANE do
      seg = seg * 2
    end
    lanes = slots * seg
    per_lane = gsize // seg
  else
    lanes = math.max(1, math.min(32, pow2_floor(E // TARGET_PER_LANE)))
    local align = pow2_dividing(16 // dtype_bytes[cfg.logits_dtype], E)
    per_lane = (E + lanes - 1) // lanes
    per_lane = (per_lane + align - 1) // align * align
    seg = lanes
  end
  local esize = dtype_bytes[cfg.logits_dtype]
  local threads = per_lane > 32 and 128 or 256
  local p = {
    experts = E,
    topk = K,
    grouped = grouped,
    ngroups = ngroups,
    gsize = grouped and gsize or E,
    group_k = grouped and K // cfg.group_topk or 0,
    group_topk = grouped and cfg.group_topk or 0,
    lanes = lanes,
    seg = seg,
    per_lane = per_lane,
    -- vector widths (elements) of each access; all divide E and per_lane
    logit_vec = pow2_dividing(16 // esize, E, per_lane),
    map_vec = pow2_dividing(16, E, per_lane),
    inter_vec = pow2_dividing(4, E, per_lane),
    threads = threads,
    -- cap registers at 64 for 4 resident blocks (32 warps) where that was
    -- seen not to spill (<= 16 experts and at most one compact entry per lane)
    min_blocks = (per_lane <= 16 and K <= lanes) and 4 or 1,
    tokens_per_block = threads // 32 * (32 // lanes),
    smem_bytes = 4 * E, -- per-block expert histogram for the fused counts
    logits_type = dtype_ctype[cfg.logits_dtype],
    logits_dtype_id = ({ fp32 = 0, bf16 = 1, fp16 = 2 })[cfg.logits_dtype],
  }
  return p
end

return { router = router_plan() }

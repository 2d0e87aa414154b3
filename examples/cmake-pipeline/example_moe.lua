-- The example's MoE layer: a scaled-down DeepSeek-V3 (sigmoid scores with an
-- expert bias, 8 groups of which each token keeps 4, top-8, probs normalized
-- over the 8 and scaled by 2.5). H and F are small to keep the example fast;
-- the kernels are specialized for exactly these numbers.
return {
  name = "example_moe",
  experts = 64,
  topk = 8,
  hidden = 512,
  ffn = 256,
  score = "sigmoid",
  groups = 8,
  group_topk = 4,
  expert_bias = true,
  scaling = 2.5,
}

-- A hand-written config: comments, locals and math are allowed.
local E = 2 ^ 7               -- 128.0, a float
return {
  name = "good",
  experts = math.tointeger(E),
  topk = 8,
  hidden = 2 ^ 12,             -- integral floats are accepted
  ffn = 1536,
  score = "sqrtsoftplus",
  groups = 8,
  group_topk = 4,
  expert_bias = true,
  scaling = 2.5,
  logits_dtype = "fp32",
  dtype = "fp16",
  shared_experts = 2,
  aux_loss_coeff = 1e-3,
}

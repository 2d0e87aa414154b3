-- For the source-order CLI test: overrides experts and topk only.
return {
  experts = 64,
  topk = 2,
}

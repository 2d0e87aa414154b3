return {
  experts = 8,
  topk = 2
  hidden = 64,
}

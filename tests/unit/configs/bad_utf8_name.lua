-- name holds the byte 0xe9 (Latin-1 e-acute), which is not UTF-8
return {
  experts = 8,
  topk = 2,
  hidden = 64,
  ffn = 64,
  name = "caf\xe9",
}

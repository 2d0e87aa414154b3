-- Valid syntax, invalid config: topk above the kernel limit (line 5).
return {
  experts = 256,
  hidden = 1024,
  topk = 40,
  ffn = 512,
}

-- The install test's module: small and generic (softmax top-k over 16 experts).
return { name = "consumer_moe", experts = 16, topk = 2, hidden = 256, ffn = 128 }

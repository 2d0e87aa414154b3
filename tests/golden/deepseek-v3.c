/* The image: what moegen_module_create needs. golden_cubin and
 * golden_source are defined above by the generator. */
const moegen_image golden_image = {
  .abi_version = MOEGEN_RT_ABI_VERSION,
  .name = "golden",
  .arch = "sm_90a",
  .config_lua = golden_config_lua,
  .cubin = golden_cubin,
  .cubin_size = sizeof golden_cubin,
  .source = golden_source,
  .source_size = sizeof golden_source - 1,
  .source_path = "golden.cu",
  .router = {
    .experts = 256,
    .topk = 8,
    .threads = 256,
    .tokens_per_block = 16,
    .smem_bytes = 1024,
    .logits_dtype = 1,
    .has_bias = 1,
  },
};

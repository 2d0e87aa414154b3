/* tests/gpu/router_specs.h -- the router configurations the forward GPU test
 * (test_router.c) runs, and its CPU emulation (tests/emu) too: every score
 * function and option, odd E, K up to 32, E up to 2048, groups of one
 * expert and groups spanning lanes, quantile balancing. */
#ifndef MOEGEN_TESTS_ROUTER_SPECS_H
#define MOEGEN_TESTS_ROUTER_SPECS_H

#include "router_spec.h"

static const spec router_specs[] = {
    {"deepseek-v3: sigmoid, 8 groups keep 4, bias, x2.5", 256, 8, 8, 4, 1, 0, MOEGEN_SCORE_SIGMOID, 2.5, MOEGEN_DTYPE_BF16, 0},
    {"kimi-k2: sigmoid, bias, E=384", 384, 8, 0, 0, 1, 0, MOEGEN_SCORE_SIGMOID, 2.827, MOEGEN_DTYPE_BF16, 0},
    {"qwen3: softmax pre", 128, 8, 0, 0, 0, 1, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"mixtral: softmax post E=8 K=2", 8, 2, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"gpt-oss: softmax post fp32", 128, 4, 0, 0, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_FP32, 0},
    {"llama4: sigmoid K=1 fp16", 128, 1, 0, 0, 0, 0, MOEGEN_SCORE_SIGMOID, 1.0, MOEGEN_DTYPE_FP16, 0},
    {"sqrtsoftplus E=130 K=5 bias fp32", 130, 5, 0, 0, 1, 0, MOEGEN_SCORE_SQRTSOFTPLUS, 1.5, MOEGEN_DTYPE_FP32, 0},
    {"sqrtsoftplus 3 groups keep 2 fp16", 96, 4, 3, 2, 1, 0, MOEGEN_SCORE_SQRTSOFTPLUS, 1.0, MOEGEN_DTYPE_FP16, 0},
    {"softmax pre 4 groups keep 2", 64, 6, 4, 2, 0, 1, MOEGEN_SCORE_SOFTMAX, 2.0, MOEGEN_DTYPE_FP32, 0},
    {"softmax post 8 groups keep 4", 256, 8, 8, 4, 0, 0, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"sigmoid E=2048 K=32", 2048, 32, 0, 0, 0, 0, MOEGEN_SCORE_SIGMOID, 1.0, MOEGEN_DTYPE_FP32, 0},
    {"sigmoid E=2048 K=32 bias", 2048, 32, 0, 0, 1, 0, MOEGEN_SCORE_SIGMOID, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"softmax pre K=E=7", 7, 7, 0, 0, 0, 1, MOEGEN_SCORE_SOFTMAX, 1.0, MOEGEN_DTYPE_FP32, 0},
    {"sigmoid E=1 K=1", 1, 1, 0, 0, 0, 0, MOEGEN_SCORE_SIGMOID, 1.0, MOEGEN_DTYPE_FP32, 0},
    {"sigmoid E=33 K=32 bf16", 33, 32, 0, 0, 0, 0, MOEGEN_SCORE_SIGMOID, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"sqrtsoftplus E=1024 16 groups keep 4 K=16", 1024, 16, 16, 4, 1, 0, MOEGEN_SCORE_SQRTSOFTPLUS, 1.0, MOEGEN_DTYPE_BF16, 0},
    {"sigmoid E=32 K=3 groups 32 keep 3", 32, 3, 32, 3, 0, 0, MOEGEN_SCORE_SIGMOID, 1.0, MOEGEN_DTYPE_FP32, 0},
    {"qb: kimi-k2 sigmoid bias E=384 K=8", 384, 8, 0, 0, 1, 0, MOEGEN_SCORE_SIGMOID, 2.827, MOEGEN_DTYPE_BF16, 1},
    {"qb: E=130 K=5 fp32 x1.5", 130, 5, 0, 0, 1, 0, MOEGEN_SCORE_SIGMOID, 1.5, MOEGEN_DTYPE_FP32, 1},
    {"qb: E=7 K=6", 7, 6, 0, 0, 1, 0, MOEGEN_SCORE_SIGMOID, 1.0, MOEGEN_DTYPE_FP32, 1},
};
#define ROUTER_SPECS (sizeof router_specs / sizeof router_specs[0])

#endif

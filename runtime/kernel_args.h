/* runtime/kernel_args.h -- internal: the arguments of every kernel launch,
 * derived from moegen/abi.def's MOEGEN_SIGNATURES.
 *
 * For each signature SIG: the struct moegen_args_SIG with one field per
 * parameter, in launch order (a grouped-GEMM operand O(x) is field mx, a
 * moegen_gemm_operand), and moegen_params_SIG(args, portable, params), which
 * fills cuLaunchKernel's params array (at most MOEGEN_MAX_PARAMS entries)
 * in that order. An op fills the struct by field name and launches through
 * moegen_launch_SIG (moegen_module_launch), which checks the kernel's
 * signature; the generator checks at render time that each rendered kernel
 * declares the same parameters and that each struct passed by value has
 * the layout below (gen/abi.c), so host and device order are one fact. */
#ifndef MOEGEN_RUNTIME_KERNEL_ARGS_H
#define MOEGEN_RUNTIME_KERNEL_ARGS_H

#include <stdint.h>

#include "module.h"
#include "tma.h"

/* The structs passed by value (abi.def's MOEGEN_PARAM_STRUCTS; the
 * rendered source checks each device struct's layout against them). */
#define MOEGEN_PARAM_FIELD_(type, name) type name;
#define MOEGEN_PARAM_STRUCT_(type, FIELDS) typedef struct type { FIELDS(MOEGEN_PARAM_FIELD_) } type;
MOEGEN_PARAM_STRUCTS(MOEGEN_PARAM_STRUCT_)
#undef MOEGEN_PARAM_STRUCT_

enum { MOEGEN_MAX_PARAMS = 16 };

#define MOEGEN_ARG_FIELD_(type, name) type name;
#define MOEGEN_ARG_OPERAND_(name) moegen_gemm_operand m##name;
#define MOEGEN_ARGS_STRUCT_(sig, params) typedef struct moegen_args_##sig { params } moegen_args_##sig;
MOEGEN_SIGNATURES(MOEGEN_ARGS_STRUCT_, MOEGEN_ARG_FIELD_, MOEGEN_ARG_OPERAND_, MOEGEN_ARG_FIELD_,
                  MOEGEN_ARG_OPERAND_)
#undef MOEGEN_ARGS_STRUCT_

/* An operand's parameter: the tensor map (sm_90a) or the pointer (portable). */
#define MOEGEN_PARAM_(type, name) params[n++] = &a->name;
#define MOEGEN_PARAM_OPERAND_(name) params[n++] = portable ? (void *)&a->m##name.ptr : (void *)&a->m##name.map;
#define MOEGEN_PARAMS_FN_(sig, params_list)                                                  \
  static inline int moegen_params_##sig(moegen_args_##sig *a, int portable, void **params) { \
    int n = 0;                                                                                \
    (void)portable;                                                                           \
    params_list return n;                                                                     \
  }
MOEGEN_SIGNATURES(MOEGEN_PARAMS_FN_, MOEGEN_PARAM_, MOEGEN_PARAM_OPERAND_, MOEGEN_PARAM_,
                  MOEGEN_PARAM_OPERAND_)
#undef MOEGEN_PARAMS_FN_

/* moegen_launch_SIG(m, id, fn, dims, args, stream, what): packs args and
 * launches kernel id (fn) through moegen_module_launch. */
#define MOEGEN_LAUNCH_FN_(sig, params_list)                                                      \
  static inline moegen_status moegen_launch_##sig(moegen_module *m, moegen_kernel_id id,         \
                                                  CUfunction fn, const moegen_launch_dims *d,    \
                                                  moegen_args_##sig *a, CUstream stream,         \
                                                  const char *what) {                            \
    void *params[MOEGEN_MAX_PARAMS];                                                             \
    moegen_params_##sig(a, moegen_module_image(m)->gemm.portable, params);                       \
    return moegen_module_launch(m, id, MOEGEN_SIG_##sig, fn, d, params, stream, what);           \
  }
MOEGEN_SIGNATURES(MOEGEN_LAUNCH_FN_, , , , )
#undef MOEGEN_LAUNCH_FN_

#endif

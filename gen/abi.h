/* gen/abi.h -- internal: the generator's view of the image ABI table
 * (moegen/abi.def): the plan fields of an image as a flat list, the
 * kernels, their parameter lists, and what the generator derives from them
 * (implemented in gen/abi.c). */
#ifndef MOEGEN_GEN_ABI_H
#define MOEGEN_GEN_ABI_H

#include <stddef.h>

#include "moegen/moegen.h"
#include "render.h"

/* One int (or moegen_dtype) plan field of moegen_image. */
typedef struct moegen_abi_field {
  char path[48];   /* "router.experts", "gemm.gemm1.bm": C designator and Lua key path */
  size_t offset;   /* offsetof(moegen_image, <path>) */
} moegen_abi_field;

/* Every plan field of an image, in abi.def order (static; thread-safe). */
const moegen_abi_field *moegen_abi_fields(size_t *count);

/* The int at field f of image. */
int moegen_abi_get(const moegen_image *image, const moegen_abi_field *f);

/* One kernel of MOEGEN_KERNELS. */
typedef struct moegen_abi_kernel {
  const char *name;      /* "moegen_router_fwd" */
  moegen_unit unit;
  const char *plan;      /* image plan path: "router", "gemm.gemm1" */
  const char *threads;   /* that plan's field of the block size: "threads", "loss_threads" */
  const char *smem;      /* its field of the dynamic shared memory, or NULL */
  const char *signature; /* "gemm_fwd" */
} moegen_abi_kernel;

extern const moegen_abi_kernel moegen_abi_kernels[];
extern const size_t moegen_abi_kernel_count;

/* Block size and dynamic shared memory of kernel k in image; 0 threads: the
 * image lacks the kernel (the one kernel-absent rule, with the unit bit). */
void moegen_abi_kernel_shape(const moegen_image *image, const moegen_abi_kernel *k, int *threads,
                             int *smem);

/* 1 if image holds kernel `name` ("moegen_gemm1_fwd"), else 0. */
int moegen_abi_present(const moegen_image *image, const char *name);

/* Reads every plan field of plan.lua's result (global `plan` of sb) into
 * image (plan.<path>; a missing or non-integer one, or one outside the
 * range of an int, is an error naming it). */
int moegen_abi_read_plan(moegen_sandbox *sb, moegen_image *image, moegen_error *err);

/* Runs the generated chunk that sets global `abi` in sb: abi.dtype,
 * abi.dtype_bytes, abi.score, abi.index_dtype, abi.count_dtype, abi.limits,
 * abi.recipe, abi.fp8_grad_format, abi.fp8_scale, abi.fp8_format, abi.fp8_max
 * (moegen/types.h) and abi.kernels
 * (name = {id, name, unit, plan, params = {parameter names, launch order}}),
 * abi.layout_check and abi.want. */
int moegen_abi_export(moegen_sandbox *sb, moegen_error *err);

/* Checks that every extern "C" kernel in the rendered source cu is one the
 * image holds, that every kernel the image holds is there, and that each
 * declares its abi.def parameters in launch order (names and kinds; on the
 * portable GEMM path, without the sm_90a-only tail), inside its own
 * abi.want guard. EX_SOFTWARE naming the kernel (and both lists) otherwise. */
int moegen_abi_check_source(const char *cu, const moegen_image *image, moegen_error *err);

/* The AOT image definition (the text of NAME.c after the data arrays): a
 * designated initializer of `const moegen_image NAME_image` with every plan
 * field of image, printed from the struct. malloc'd; NULL if out of memory. */
char *moegen_abi_image_c(const moegen_image *image, const moegen_gen_options *opt);

/* Compares the plan fields and units of two images; 0 if equal, else the
 * number of differences, the first described in why. */
int moegen_abi_image_diff(const moegen_image *a, const moegen_image *b, char *why, size_t size);

#endif

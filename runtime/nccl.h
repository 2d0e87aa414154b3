/* runtime/nccl.h -- libnccl.so.2 loaded at run time (no link-time NCCL).
 *
 * The prototypes are nccl.h's (NCCL 2.x, stable since 2.7 for these calls):
 * ncclResult_t and ncclDataType_t are C enums (int), ncclComm_t is
 * `struct ncclComm *`, cudaStream_t is CUstream. The exchange moves bytes
 * only (no reductions), so one datatype is used: ncclInt8 (0). */
#ifndef MOEGEN_RUNTIME_NCCL_H
#define MOEGEN_RUNTIME_NCCL_H

#include <stddef.h>

#include "moegen/runtime.h"

enum { MOEGEN_NCCL_INT8 = 0 /* ncclInt8 */ };

typedef struct moegen_nccl {
  int version; /* ncclGetVersion: major*10000 + minor*100 + patch (2.19+) */
  int (*ncclGetVersion)(int *version);
  const char *(*ncclGetErrorString)(int result);
  int (*ncclGroupStart)(void);
  int (*ncclGroupEnd)(void);
  int (*ncclSend)(const void *buf, size_t count, int datatype, int peer, struct ncclComm *comm,
                  CUstream stream);
  int (*ncclRecv)(void *buf, size_t count, int datatype, int peer, struct ncclComm *comm,
                  CUstream stream);
  int (*ncclCommCount)(const struct ncclComm *comm, int *count);
  int (*ncclCommUserRank)(const struct ncclComm *comm, int *rank);
} moegen_nccl;

/* The process-wide table, loaded on the first call ($MOEGEN_LIBNCCL, else
 * libnccl.so.2). MOEGEN_ERR_NOT_SUPPORTED with the reason (naming the
 * library) in why[why_size] if it cannot be loaded or lacks an entry point. */
moegen_status moegen_nccl_get(const moegen_nccl **out, char *why, size_t why_size);

#endif

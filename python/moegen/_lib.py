"""ctypes binding of libmoegen.so: the runtime, the generator library and
python/moegen_capi.c (the mgp_* functions) in one shared library.

The library is found at $MOEGEN_LIBRARY, else next to this file (where
`pip install` puts it). Only functions of plain scalars and pointers are
bound: every struct stays on the C side."""
import ctypes
import os

_c = ctypes
_p = _c.c_void_p
_i64 = _c.c_int64
_int = _c.c_int
_str = _c.c_char_p
_size = _c.c_size_t

# name: (restype, argtypes)
_PROTOTYPES = {
    "moegen_status_string": (_str, [_int]),
    "moegen_module_last_error": (_str, [_p]),
    "moegen_module_load": (_int, [_p]),
    "moegen_module_destroy": (None, [_p]),
    "moegen_preset_names": (_c.POINTER(_str), []),
    "moegen_dtype_name": (_str, [_int]),
    "mgp_config_new": (_int, [_str, _str, _str, _c.POINTER(_str), _int, _c.POINTER(_p), _str,
                              _size]),
    "mgp_config_free": (None, [_p]),
    "mgp_config_dims": (None, [_p] + [_c.POINTER(_int)] * 8),
    "mgp_config_lua": (_size, [_p, _str, _size]),
    "mgp_image_new": (_int, [_p, _str, _c.POINTER(_p), _str, _size]),
    "mgp_image_free": (None, [_p]),
    "mgp_jit": (_int, [_p, _str, _c.POINTER(_p), _str, _size]),
    "mgp_jit_warm": (_int, [_p, _str, _c.POINTER(_int), _str, _size]),
    "mgp_bind_device": (_int, [_int, _str, _size]),
    "mgp_layer_bytes": (_int, [_p, _i64, _c.POINTER(_i64), _c.POINTER(_i64)]),
    "mgp_layer_fwd": (_int, [_p, _i64] + [_p] * 7 + [_i64, _p, _i64, _p]),
    "mgp_layer_bwd": (_int, [_p, _i64, _p, _p, _p, _p, _i64, _p, _p, _p, _p, _p, _i64, _p]),
    "mgp_index_dtype": (_int, [_str]),
    "mgp_router_fwd_shape": (_int, [_p, _i64, _str, _c.POINTER(_i64)]),
    "mgp_router_fwd": (_int, [_p, _i64] + [_p] * 6 + [_int] + [_p] * 4 + [_int, _p, _p, _p]),
    "mgp_router_bwd": (_int, [_p, _i64] + [_p] * 6 + [_int, _p, _p]),
    "mgp_dtype": (_int, [_str]),
    "mgp_permute_shape": (_int, [_p, _i64, _int, _int, _str, _c.POINTER(_i64)]),
    "mgp_permute_fwd": (_int, [_p, _i64, _int] + [_p] * 5 + [_int, _int] + [_p] * 7
                        + [_i64, _p]),
    "mgp_permute_bwd": (_int, [_p, _i64, _int] + [_p] * 7),
    "mgp_unpermute_fwd": (_int, [_p, _i64, _int] + [_p] * 5),
    "mgp_unpermute_bwd": (_int, [_p, _i64, _i64, _int] + [_p] * 9),
    "mgp_gemm_shape": (_int, [_p, _int, _i64, _str, _c.POINTER(_i64)]),
    "mgp_gemm_fwd": (_int, [_p, _int, _i64] + [_p] * 6 + [_i64, _p]),
    "mgp_gemm_dgrad": (_int, [_p, _int, _i64] + [_p] * 6 + [_i64, _p]),
    "mgp_gemm_wgrad": (_int, [_p, _int, _i64] + [_p] * 6),
    "mgp_count_dtype": (_int, [_str]),
    "mgp_sort_chunks": (_int, [_p, _i64, _int, _int] + [_p] * 7 + [_int, _p]),
    "mgp_aux_scores_shape": (_int, [_p, _i64, _str, _c.POINTER(_i64)]),
    "mgp_aux_scores_fwd": (_int, [_p, _i64] + [_p] * 6),
    "mgp_aux_scores_bwd": (_int, [_p, _i64] + [_p] * 4),
    "mgp_aux_loss_workspace": (_int, [_p, _i64, _i64, _c.POINTER(_i64)]),
    "mgp_aux_loss_fwd": (_int, [_p, _i64, _i64, _p, _int, _p, _int, _p, _int, _int, _c.c_float,
                                _p, _p, _p, _i64, _p]),
    "mgp_aux_loss_bwd": (_int, [_p, _i64, _i64, _p, _p, _int, _p, _int, _p, _p]),
}


def _find():
    path = os.environ.get("MOEGEN_LIBRARY")
    if path:
        return path
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libmoegen.so")
    if os.path.exists(here):
        return here
    raise ImportError("moegen: libmoegen.so not found next to the package and MOEGEN_LIBRARY is "
                      "unset (install with `pip install ./python`, or point MOEGEN_LIBRARY at "
                      "the build's python/libmoegen.so)")


def _load():
    lib = _c.CDLL(_find())
    for name, (res, args) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


lib = _load()

MOEGEN_OK = 0


class MoegenError(RuntimeError):
    """A moegen call failed: the status name and the module's last error."""

    def __init__(self, what, status, detail=""):
        text = lib.moegen_status_string(status).decode()
        super().__init__(f"{what}: {text}" + (f": {detail}" if detail else ""))
        self.status = status


def why_buffer():
    """A buffer for a C function's error message, and its size."""
    return _c.create_string_buffer(1024), 1024

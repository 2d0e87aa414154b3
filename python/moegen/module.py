"""moegen.Module: a config made into shape functions (pure, no GPU) and a
JIT module (kernels compiled by NVRTC at first use, through the disk cache
$MOEGEN_CACHE_DIR)."""
import ctypes
import hashlib
import os
import threading

import torch

from ._lib import MOEGEN_OK, MoegenError, lib, why_buffer

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# Modules by key, for the custom ops (which name their module by this string).
_registry = {}
_registry_lock = threading.Lock()


def preset_names():
    """The built-in preset names (moegen --list-presets)."""
    names, arr, i = [], lib.moegen_preset_names(), 0
    while arr[i]:
        names.append(arr[i].decode())
        i += 1
    return names


def _config_sources(config):
    """(preset, hf_config, lua, ["key=value", ...]) of a config argument."""
    if isinstance(config, os.PathLike):
        config = os.fspath(config)
    if isinstance(config, str):
        if config.endswith(".json"):
            return None, config, None, []
        if config.endswith(".lua"):
            return None, None, config, []
        return config, None, None, []
    if isinstance(config, dict):
        cfg = dict(config)
        src = [cfg.pop(k, None) for k in ("preset", "hf_config", "lua")]
        src = [os.fspath(s) if isinstance(s, os.PathLike) else s for s in src]
        sets = []
        for key, value in cfg.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            sets.append(f"{key}={value}")
        return src[0], src[1], src[2], sets
    raise TypeError("moegen: config must be a preset name, a path to a Hugging Face config.json "
                    f"or a Lua file, or a dict of config keys, not {type(config).__name__}")


def _device_arch():
    """The arch moegen_jit picks for the current CUDA device (sm_90a on Hopper)."""
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" + ("a" if major == 9 else "")


def _enc(s):
    return s.encode() if s is not None else None


class Module:
    """A moegen module built from `config`: a preset name ("qwen3-30b-a3b"),
    a Hugging Face config.json path, a Lua config path, or a dict of config
    keys (`moegen --help` lists them) that may name a "preset", "hf_config"
    or "lua" source to start from, applied in that order, then the keys.

    arch: "sm_90a", ...; None = the current CUDA device's (sm_90a without a
    device, for shapes only). Shapes come from the C shape functions on a
    rendered image (no GPU); the kernels from moegen_jit, compiled at the
    first launch on each device (or `load()`) through the disk cache."""

    def __init__(self, config, *, arch=None):
        preset, hf, lua, sets = _config_sources(config)
        why, n = why_buffer()
        cfg = ctypes.c_void_p()
        argv = (ctypes.c_char_p * max(1, len(sets)))(*[s.encode() for s in sets])
        rc = lib.mgp_config_new(_enc(preset), _enc(hf), _enc(lua), argv, len(sets),
                                ctypes.byref(cfg), why, n)
        if rc:
            raise ValueError(f"moegen config: {why.value.decode()}")
        self._cfg = cfg
        dims = [ctypes.c_int() for _ in range(8)]
        lib.mgp_config_dims(cfg, *[ctypes.byref(d) for d in dims])
        (self.experts, self.topk, self.hidden, self.ffn, ldt, dt, bias, qb) = [d.value for d in dims]
        self.logits_dtype = _DTYPES[lib.moegen_dtype_name(ldt).decode()]
        self.dtype = _DTYPES[lib.moegen_dtype_name(dt).decode()]
        self.expert_bias, self.quantile_balancing = bool(bias), bool(qb)
        size = lib.mgp_config_lua(cfg, None, 0)
        buf = ctypes.create_string_buffer(size + 1)
        lib.mgp_config_lua(cfg, buf, size + 1)
        self.config_lua = buf.value.decode()
        if arch is None:
            arch = _device_arch() if torch.cuda.is_available() else "sm_90a"
        self.arch = arch
        img = ctypes.c_void_p()
        rc = lib.mgp_image_new(cfg, arch.encode(), ctypes.byref(img), why, n)
        if rc:
            raise ValueError(f"moegen render ({arch}): {why.value.decode()}")
        self._image = img
        digest = hashlib.sha256((arch + "\n" + self.config_lua).encode()).hexdigest()[:16]
        self.key = f"{arch}-{digest}"
        self._handle = None
        self._lock = threading.Lock()
        with _registry_lock:
            _registry.setdefault(self.key, self)

    def __repr__(self):
        return (f"moegen.Module(E={self.experts}, K={self.topk}, H={self.hidden}, F={self.ffn}, "
                f"arch={self.arch})")

    def __del__(self):
        if getattr(self, "_handle", None):
            lib.moegen_module_destroy(self._handle)
        if getattr(self, "_image", None):
            lib.mgp_image_free(self._image)
        if getattr(self, "_cfg", None):
            lib.mgp_config_free(self._cfg)

    # ------------------------------------------------------------ shapes (pure)

    def layer_bytes(self, num_tokens):
        """(saved_bytes, workspace_bytes) of the layer ops at T = num_tokens
        (moegen_layer_shape_of)."""
        s, w = ctypes.c_int64(), ctypes.c_int64()
        st = lib.mgp_layer_bytes(self._image, num_tokens, ctypes.byref(s), ctypes.byref(w))
        if st != MOEGEN_OK:
            raise MoegenError("moegen_layer_shape_of", st, "the layer needs the grouped GEMM "
                              "(sm_80 or later; hidden and ffn multiples of 8)")
        return s.value, w.value

    def layer_saved_size(self, num_tokens):
        """Bytes of the layer's saved tensor at T = num_tokens: a*T + b, the
        affine bound on moegen_layer_shape_of's saved_bytes (see
        _affine_bound), so that a compiled graph has it as a symbolic size.
        Works on a SymInt."""
        a, b = self._saved_affine()
        return a * num_tokens + b

    def _saved_affine(self):
        if not hasattr(self, "_saved_ab"):
            self._saved_ab = _affine_bound(lambda t: self.layer_bytes(t)[0])
        return self._saved_ab

    def router_fwd_shape(self, name, num_tokens):
        """One output's shape of moegen_router_fwd_shape_of at T = num_tokens,
        by its field name ("probs", "routing_map", "routing_bitmap",
        "topk_indices", "topk_weights", "intermediate", "expert_counts",
        "qb_cutoff"), as a tuple. Works on a SymInt: every dim is affine in
        T, a*T + b with a and b read off the C function (_affine_dims)."""
        if not isinstance(num_tokens, int):
            return tuple(a * num_tokens + b for a, b in self._router_affine(name))
        dims = (ctypes.c_int64 * 2)()
        rank = lib.mgp_router_fwd_shape(self._image, num_tokens, name.encode(), dims)
        if rank < 0:
            raise MoegenError("moegen_router_fwd_shape_of", -rank)
        if rank == 0:
            raise ValueError(f"moegen: the router has no output {name!r}")
        return tuple(dims[:rank])

    def _router_affine(self, name):
        cache = self.__dict__.setdefault("_router_ab", {})
        if name not in cache:
            cache[name] = _affine_dims(lambda t: self.router_fwd_shape(name, t))
        return cache[name]

    def permute_shape(self, name, num_tokens, align=1):
        """One output's shape of moegen_permute_shape_of(T, align, capacity =
        0) by its field name ("rows", "permuted_probs", "row_map", "offsets",
        "counts"; "workspace_bytes" as a 1-tuple, concrete T only), as a
        tuple. Works on a SymInt (dims affine in T, _affine_dims)."""
        if not isinstance(num_tokens, int):
            key = (name, align)
            cache = self.__dict__.setdefault("_permute_ab", {})
            if key not in cache:
                cache[key] = _affine_dims(lambda t: self.permute_shape(name, t, align))
            return tuple(a * num_tokens + b for a, b in cache[key])
        dims = (ctypes.c_int64 * 2)()
        rank = lib.mgp_permute_shape(self._image, num_tokens, align, 0, name.encode(), dims)
        if rank < 0:
            raise MoegenError("moegen_permute_shape_of", -rank,
                              f"align = {align} (1 or a power of two <= 128)")
        if rank == 0:
            raise ValueError(f"moegen: the permutation has no output {name!r}")
        return tuple(dims[:rank])

    def gemm_shape(self, which, name, max_rows):
        """One shape of moegen_gemm_fwd_shape_of(which = 1 (gate/up) or 2
        (down), max_rows) by its field name ("x", "w", "y", "counts";
        "workspace_bytes" as a 1-tuple, concrete max_rows only), as a tuple.
        Works on a SymInt (dims affine in max_rows)."""
        if not isinstance(max_rows, int):
            key = (which, name)
            cache = self.__dict__.setdefault("_gemm_ab", {})
            if key not in cache:
                cache[key] = _affine_dims(lambda t: self.gemm_shape(which, name, t))
            return tuple(a * max_rows + b for a, b in cache[key])
        dims = (ctypes.c_int64 * 3)()
        rank = lib.mgp_gemm_shape(self._image, which, max_rows, name.encode(), dims)
        if rank < 0:
            raise MoegenError("moegen_gemm_fwd_shape_of", -rank, f"which = {which} (1 or 2); "
                              "the GEMMs need sm_80 or later and hidden, ffn multiples of 8")
        if rank == 0:
            raise ValueError(f"moegen: the grouped GEMM has no shape {name!r}")
        return tuple(dims[:rank])

    def aux_scores_shape(self, name, num_tokens):
        """One shape of moegen_aux_scores_shape_of(T) by its field name
        ("scores", "routing_map", "routing_bitmap", "intermediate",
        "grad_logits"), as a tuple; works on a SymInt (dims affine in T)."""
        if not isinstance(num_tokens, int):
            cache = self.__dict__.setdefault("_aux_ab", {})
            if name not in cache:
                cache[name] = _affine_dims(lambda t: self.aux_scores_shape(name, t))
            return tuple(a * num_tokens + b for a, b in cache[name])
        dims = (ctypes.c_int64 * 2)()
        rank = lib.mgp_aux_scores_shape(self._image, num_tokens, name.encode(), dims)
        if rank < 0:
            raise MoegenError("moegen_aux_scores_shape_of", -rank)
        if rank == 0:
            raise ValueError(f"moegen: the aux-loss scores have no output {name!r}")
        return tuple(dims[:rank])

    def aux_loss_workspace(self, rows, cols):
        """moegen_aux_loss_shape_of's workspace bytes for probs [rows, cols]."""
        w = ctypes.c_int64()
        st = lib.mgp_aux_loss_workspace(self._image, rows, cols, ctypes.byref(w))
        if st != MOEGEN_OK:
            raise MoegenError("moegen_aux_loss_shape_of", st, f"probs [{rows}, {cols}]")
        return w.value

    # ------------------------------------------------------------ the JIT module

    def handle(self, device):
        """The moegen_module pointer (moegen_jit once; each compile unit is
        compiled, through the disk cache, at the first launch of one of its
        kernels on a device), with `device`'s primary context made current on
        this thread if none is."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        why, n = why_buffer()
        st = lib.mgp_bind_device(index, why, n)
        if st != MOEGEN_OK:
            raise MoegenError("moegen: binding the CUDA device", st, why.value.decode())
        if self._handle is None:
            with self._lock:
                if self._handle is None:
                    h = ctypes.c_void_p()
                    st = lib.mgp_jit(self._cfg, self.arch.encode(), ctypes.byref(h), why, n)
                    if st != MOEGEN_OK:
                        if h:
                            lib.moegen_module_destroy(h)
                        raise MoegenError("moegen_jit", st, why.value.decode())
                    self._handle = h
        return self._handle

    def load(self, device=None):
        """Compiles (cold JIT, once per cache) and loads every kernel for
        `device` (default: the current CUDA device) now, so that no launch
        waits for NVRTC (eager warm-up runs, as torch.compile's CUDA graphs
        do before capturing, load what they launch anyway)."""
        device = torch.device("cuda", torch.cuda.current_device()) if device is None \
            else torch.device(device)
        self.check(lib.moegen_module_load(self.handle(device)), "moegen_module_load")

    def warm(self):
        """Fills the JIT disk cache with this module's kernels for its arch
        without a GPU or a driver (moegen_jit_warm; NVRTC only), e.g. while
        building a container image. Returns how many kernels it compiled
        (the others were cached)."""
        why, n = why_buffer()
        compiled = ctypes.c_int()
        st = lib.mgp_jit_warm(self._cfg, self.arch.encode(), ctypes.byref(compiled), why, n)
        if st != MOEGEN_OK:
            raise MoegenError("moegen_jit_warm", st, why.value.decode())
        return compiled.value

    def check(self, status, what):
        """Raises MoegenError with the module's last error unless status is OK."""
        if status != MOEGEN_OK:
            detail = lib.moegen_module_last_error(self._handle).decode() if self._handle else ""
            raise MoegenError(what, status, detail)


def _affine_bound(f, period=256, probes=(0, 1, 255, 256, 1000, 4097, 65536 + 17)):
    """(a, b) with f(T) <= a*T + b for T >= 0, for f(T) = a*T + p(T) with p
    periodic in T (period divides `period`): a sum of linear terms each
    rounded up to an alignment, as the shape functions' byte counts are.
    a = (f(P + period) - f(P)) / period; b = the largest f(t) - a*t over one
    period. Checked at `probes`; the ops check every T they run at."""
    step = f(period) - f(0)
    if step % period:
        raise AssertionError(f"moegen: a shape size is not affine plus periodic ({step})")
    a = step // period
    b = max(f(t) - a * t for t in range(period))
    for t in probes:
        if f(t) > a * t + b:
            raise AssertionError(f"moegen: the affine bound {a}*T + {b} misses T = {t}")
    return a, b


def _affine_dims(f, probes=(0, 3, 1000, 65537)):
    """[(a, b), ...] with f(T)[i] = a*T + b for a shape function f whose
    dims are affine in T; checked at `probes`."""
    f1, f2 = f(1), f(2)
    ab = [(d2 - d1, d1 - (d2 - d1)) for d1, d2 in zip(f1, f2)]
    for t in probes:
        if tuple(a * t + b for a, b in ab) != tuple(f(t)):
            raise AssertionError(f"moegen: a shape is not affine in T at T = {t}")
    return ab


def module_of(key):
    """The Module a custom op names by its key."""
    try:
        return _registry[key]
    except KeyError:
        raise ValueError(f"moegen: no module with key {key!r} in this process (create it with "
                         "moegen.Module or moegen.MoE first)") from None

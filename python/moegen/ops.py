"""The moegen:: custom ops (torch.library), their fake (meta) kernels from
the C shape functions, and their autograd.

Each op names its module by Module.key (a string, so the op's schema holds
only tensors and scalars and torch.compile treats the module as a
constant). The real kernels launch on torch.cuda.current_stream(), take
their scratch from the caching allocator (torch.empty of the shape
function's bytes: graph-safe, reused across calls), never sync the host and
are capturable in CUDA graphs (mode="reduce-overhead")."""
from typing import Optional, Tuple

import torch
from torch import Tensor

from ._lib import lib
from .module import module_of


def _ptr(t):
    return t.data_ptr() if t is not None and t.numel() else None


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


def _check(cond, what):
    if not cond:
        raise ValueError(f"moegen: {what}")


def _check_tensor(name, t, shape, dtype):
    _check(t.dtype == dtype, f"{name}: dtype {t.dtype}, expected {dtype}")
    _check(tuple(t.shape) == tuple(shape), f"{name}: shape {tuple(t.shape)}, expected "
           f"{tuple(shape)}")


def _check_layer_inputs(m, x, logits, expert_bias, w1, w2):
    _check(x.dim() == 2, f"x: [T, H] expected, got shape {tuple(x.shape)}")
    T = x.shape[0]
    E, H, F = m.experts, m.hidden, m.ffn
    _check_tensor("x", x, (T, H), m.dtype)
    _check_tensor("logits", logits, (T, E), m.logits_dtype)
    _check_tensor("w1", w1, (E, 2 * F, H), m.dtype)
    _check_tensor("w2", w2, (E, H, F), m.dtype)
    if m.expert_bias:
        _check(expert_bias is not None, "expert_bias: the config has an expert bias ([E] fp32)")
        _check_tensor("expert_bias", expert_bias, (E,), torch.float32)
    else:
        _check(expert_bias is None, "expert_bias: the config has none (pass None)")
    return T


def _check_contiguous(**tensors):
    """Every given tensor contiguous and on one CUDA device."""
    device = None
    for name, t in tensors.items():
        if t is not None:
            _check(t.is_contiguous(), f"{name}: must be contiguous")
            _check(t.is_cuda, f"{name}: must be a CUDA tensor")
            device = device or t.device
            _check(t.device == device, f"{name}: on {t.device}, the other tensors on {device}")


# ---------------------------------------------------------------- the layer


@torch.library.custom_op("moegen::layer_fwd", mutates_args=(), device_types="cuda")
def layer_fwd(module: str, x: Tensor, logits: Tensor, expert_bias: Optional[Tensor], w1: Tensor,
              w2: Tensor) -> Tuple[Tensor, Tensor]:
    """The MoE layer forward (moegen_layer_fwd) at T = x.shape[0]:
    x [T, H] bf16, logits [T, E] (the config's logits dtype), expert_bias
    [E] fp32 or None, w1 [E, 2F, H] bf16, w2 [E, H, F] bf16, all
    contiguous. Returns y [T, H] bf16 and saved (uint8, Module.layer_saved_size(T)
    bytes), the state layer_bwd reads."""
    m = module_of(module)
    T = _check_layer_inputs(m, x, logits, expert_bias, w1, w2)
    _check_contiguous(x=x, logits=logits, expert_bias=expert_bias, w1=w1, w2=w2)
    need, ws_bytes = m.layer_bytes(T)
    saved_bytes = m.layer_saved_size(T)
    _check(need <= saved_bytes, f"layer saved bytes {need} exceed the bound {saved_bytes}")
    h = m.handle(x.device)
    y = torch.empty(T, m.hidden, dtype=m.dtype, device=x.device)
    saved = torch.empty(saved_bytes, dtype=torch.uint8, device=x.device)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=x.device)
    m.check(lib.mgp_layer_fwd(h, T, _ptr(x), _ptr(logits), _ptr(expert_bias), _ptr(w1), _ptr(w2),
                              _ptr(y), _ptr(saved), saved_bytes, _ptr(ws), ws_bytes,
                              _stream(x.device)), "moegen_layer_fwd")
    return y, saved


@layer_fwd.register_fake
def _(module, x, logits, expert_bias, w1, w2):
    m = module_of(module)
    T = _check_layer_inputs(m, x, logits, expert_bias, w1, w2)
    return (x.new_empty(T, m.hidden, dtype=m.dtype),
            x.new_empty(m.layer_saved_size(T), dtype=torch.uint8))


@torch.library.custom_op("moegen::layer_bwd", mutates_args=(), device_types="cuda")
def layer_bwd(module: str, dy: Tensor, w1: Tensor, w2: Tensor,
              saved: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """The MoE layer backward (moegen_layer_bwd) of the layer_fwd that
    returned `saved`, at T = dy.shape[0]: dy [T, H] bf16, w1, w2 as in the
    forward. Returns dx [T, H], dlogits [T, E] (logits dtype), dw1, dw2
    (bf16, written, not accumulated). dlogits' last bits may vary run to
    run (the route-weight gradient is summed with fp32 atomics)."""
    m = module_of(module)
    T = _check_layer_bwd(m, dy, w1, w2, saved)
    _check_contiguous(dy=dy, w1=w1, w2=w2, saved=saved)
    need, ws_bytes = m.layer_bytes(T)
    _check(saved.numel() >= need, f"saved: {saved.numel()} bytes, the layer needs {need}")
    h = m.handle(dy.device)
    dx = torch.empty(T, m.hidden, dtype=m.dtype, device=dy.device)
    dlogits = torch.empty(T, m.experts, dtype=m.logits_dtype, device=dy.device)
    dw1, dw2 = torch.empty_like(w1), torch.empty_like(w2)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=dy.device)
    m.check(lib.mgp_layer_bwd(h, T, _ptr(dy), _ptr(w1), _ptr(w2), _ptr(saved), saved.numel(),
                              _ptr(dx), _ptr(dlogits), _ptr(dw1), _ptr(dw2), _ptr(ws), ws_bytes,
                              _stream(dy.device)), "moegen_layer_bwd")
    return dx, dlogits, dw1, dw2


def _check_layer_bwd(m, dy, w1, w2, saved):
    _check(dy.dim() == 2, f"dy: [T, H] expected, got shape {tuple(dy.shape)}")
    T = dy.shape[0]
    E, H, F = m.experts, m.hidden, m.ffn
    _check_tensor("dy", dy, (T, H), m.dtype)
    _check_tensor("w1", w1, (E, 2 * F, H), m.dtype)
    _check_tensor("w2", w2, (E, H, F), m.dtype)
    _check_tensor("saved", saved, (m.layer_saved_size(T),), torch.uint8)
    return T


@layer_bwd.register_fake
def _(module, dy, w1, w2, saved):
    m = module_of(module)
    T = _check_layer_bwd(m, dy, w1, w2, saved)
    return (dy.new_empty(T, m.hidden), dy.new_empty(T, m.experts, dtype=m.logits_dtype),
            torch.empty_like(w1), torch.empty_like(w2))


def _layer_setup_context(ctx, inputs, output):
    module, _x, _logits, _bias, w1, w2 = inputs
    ctx.module = module
    ctx.save_for_backward(w1, w2, output[1])


def _layer_backward(ctx, dy, _dsaved):
    w1, w2, saved = ctx.saved_tensors
    dx, dlogits, dw1, dw2 = torch.ops.moegen.layer_bwd(ctx.module, dy.contiguous(), w1, w2,
                                                       saved)
    return None, dx, dlogits, None, dw1, dw2


torch.library.register_autograd("moegen::layer_fwd", _layer_backward,
                                setup_context=_layer_setup_context)


# ---------------------------------------------------------------- the router

_ROUTING_FORMATS = ("bytemap", "bitmap")
_INDEX_DTYPES = {torch.int32: "int32", torch.int16: "int16", torch.int64: "int64"}


def _check_router_inputs(m, logits, expert_bias, qb_histogram, qb_bounds):
    _check(logits.dim() == 2, f"logits: [T, E] expected, got shape {tuple(logits.shape)}")
    T = logits.shape[0]
    _check_tensor("logits", logits, (T, m.experts), m.logits_dtype)
    if m.expert_bias:
        _check(expert_bias is not None, "expert_bias: the config has an expert bias ([E] fp32)")
        _check_tensor("expert_bias", expert_bias, (m.experts,), torch.float32)
    else:
        _check(expert_bias is None, "expert_bias: the config has none (pass None)")
    if m.quantile_balancing:
        _check(qb_histogram is not None and qb_bounds is not None,
               "qb_histogram ([E, bins] int32) and qb_bounds ([2] fp32) are required "
               "(the config has quantile_balancing)")
        _check(qb_histogram.dim() == 2 and qb_histogram.shape[1] > 0,
               "qb_histogram: [E, bins] expected")
        _check_tensor("qb_histogram", qb_histogram, (m.experts, qb_histogram.shape[1]),
                      torch.int32)
        _check_tensor("qb_bounds", qb_bounds, (2,), torch.float32)
    else:
        _check(qb_histogram is None and qb_bounds is None,
               "qb_histogram, qb_bounds: the config has no quantile_balancing (pass None)")
    return T


def _router_outputs(m, T, like, routing_map_format):
    """probs, routing (bytemap bool or bitmap uint8, or None), topk_weights,
    intermediate, expert_counts, qb_cutoff: empty tensors shaped by the C
    shape function (T may be a SymInt)."""
    s = lambda name: m.router_fwd_shape(name, T)  # noqa: E731
    probs = like.new_empty(s("probs"), dtype=m.logits_dtype)
    if routing_map_format is None:
        routing = None
    elif routing_map_format == "bytemap":
        routing = like.new_empty(s("routing_map"), dtype=torch.bool)
    else:
        routing = like.new_empty(s("routing_bitmap"), dtype=torch.uint8)
    return (probs, routing, like.new_empty(s("topk_weights"), dtype=torch.float32),
            like.new_empty(s("intermediate"), dtype=torch.float32),
            like.new_empty(s("expert_counts"), dtype=torch.int32),
            like.new_empty(s("qb_cutoff"), dtype=torch.float32))


def _launch_router_fwd(m, logits, expert_bias, routing_map_format, topk_indices, qb_histogram,
                       qb_bounds, outputs):
    probs, routing, weights, inter, counts, cutoff = outputs
    bytemap = routing if routing_map_format == "bytemap" else None
    bitmap = routing if routing_map_format == "bitmap" else None
    h = m.handle(logits.device)
    qb_bins = qb_histogram.shape[1] if qb_histogram is not None else 0
    m.check(lib.mgp_router_fwd(h, logits.shape[0], _ptr(logits), _ptr(expert_bias), _ptr(probs),
                               _ptr(bytemap), _ptr(bitmap), _ptr(topk_indices),
                               lib.mgp_index_dtype(_INDEX_DTYPES[topk_indices.dtype].encode()),
                               _ptr(weights), _ptr(inter), counts.data_ptr(), _ptr(qb_histogram),
                               qb_bins, _ptr(qb_bounds), _ptr(cutoff), _stream(logits.device)),
            "moegen_router_fwd")


@torch.library.custom_op("moegen::router_fwd", mutates_args=(), device_types="cuda")
def router_fwd(module: str, logits: Tensor, expert_bias: Optional[Tensor],
               routing_map_format: str) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The fused top-k router (moegen_router_fwd, SPEC.md 1) on logits [T, E]
    (the config's logits dtype), differentiable in logits. Returns probs
    [T, E] (logits dtype, scaling * p at the selected experts), the routing
    map (bytemap: bool [T, E]; bitmap: uint8 [T, ceil(E/8)], bit e % 8 of
    byte e / 8), topk_indices [T, K] int32 (value-descending), topk_weights
    [T, K] fp32, intermediate [T, E] fp32 (the backward's state) and
    expert_counts [E] int32. Quantile-balancing configs use router_fwd_into
    (the histogram is a mutation)."""
    m = module_of(module)
    T = _check_router_fwd(m, logits, expert_bias, routing_map_format)
    _check_contiguous(logits=logits, expert_bias=expert_bias)
    outputs = _router_outputs(m, T, logits, routing_map_format)
    idx = logits.new_empty(m.router_fwd_shape("topk_indices", T), dtype=torch.int32)
    _launch_router_fwd(m, logits, expert_bias, routing_map_format, idx, None, None, outputs)
    probs, routing, weights, inter, counts, _cutoff = outputs
    return probs, routing, idx, weights, inter, counts


def _check_router_fwd(m, logits, expert_bias, routing_map_format):
    _check(routing_map_format in _ROUTING_FORMATS,
           f"routing_map_format: {routing_map_format!r}, expected one of {_ROUTING_FORMATS}")
    _check(not m.quantile_balancing, "router_fwd: the config has quantile_balancing: use "
           "router_fwd_into (it accumulates the histogram)")
    return _check_router_inputs(m, logits, expert_bias, None, None)


@router_fwd.register_fake
def _(module, logits, expert_bias, routing_map_format):
    m = module_of(module)
    T = _check_router_fwd(m, logits, expert_bias, routing_map_format)
    probs, routing, weights, inter, counts, _cutoff = _router_outputs(m, T, logits,
                                                                      routing_map_format)
    idx = logits.new_empty(m.router_fwd_shape("topk_indices", T), dtype=torch.int32)
    return probs, routing, idx, weights, inter, counts


@torch.library.custom_op("moegen::router_fwd_into", mutates_args=("topk_indices", "qb_histogram"),
                         device_types="cuda")
def router_fwd_into(module: str, logits: Tensor, expert_bias: Optional[Tensor],
                    topk_indices: Tensor, qb_histogram: Optional[Tensor],
                    qb_bounds: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The router forward that writes into the caller's buffers: the dense
    indices into topk_indices [T, K] (int16, int32 or int64; OVERWRITTEN in
    place) and, for quantile-balancing configs, the histogram qb_histogram
    [E, bins] int32 (ACCUMULATED in place), both declared mutations;
    qb_bounds [2] fp32 (finite, lower < upper: unchecked here, a check would
    sync). No routing map. Returns probs, topk_weights, intermediate,
    expert_counts as router_fwd, and qb_cutoff [T] fp32 ([0] without
    quantile balancing). Not differentiable itself (PyTorch registers no
    autograd on a mutating op): its backward is router_bwd on the
    intermediate and topk_indices it wrote."""
    m = module_of(module)
    T = _check_router_inputs(m, logits, expert_bias, qb_histogram, qb_bounds)
    _check_indices(m, T, topk_indices)
    _check_contiguous(logits=logits, expert_bias=expert_bias, topk_indices=topk_indices,
                      qb_histogram=qb_histogram, qb_bounds=qb_bounds)
    outputs = _router_outputs(m, T, logits, None)
    _launch_router_fwd(m, logits, expert_bias, None, topk_indices, qb_histogram, qb_bounds,
                       outputs)
    probs, _, weights, inter, counts, cutoff = outputs
    return probs, weights, inter, counts, cutoff


def _check_indices(m, T, topk_indices):
    _check(topk_indices.dtype in _INDEX_DTYPES,
           f"topk_indices: dtype {topk_indices.dtype}, expected int16, int32 or int64")
    _check(tuple(topk_indices.shape) == tuple(m.router_fwd_shape("topk_indices", T)),
           f"topk_indices: shape {tuple(topk_indices.shape)}, expected [T, K] = "
           f"{tuple(m.router_fwd_shape('topk_indices', T))}")


@router_fwd_into.register_fake
def _(module, logits, expert_bias, topk_indices, qb_histogram, qb_bounds):
    m = module_of(module)
    T = _check_router_inputs(m, logits, expert_bias, qb_histogram, qb_bounds)
    _check_indices(m, T, topk_indices)
    probs, _, weights, inter, counts, cutoff = _router_outputs(m, T, logits, None)
    return probs, weights, inter, counts, cutoff


@torch.library.custom_op("moegen::router_bwd", mutates_args=(), device_types="cuda")
def router_bwd(module: str, grad_probs: Optional[Tensor], grad_weights: Optional[Tensor],
               intermediate: Tensor, topk_indices: Tensor) -> Tensor:
    """The router backward (moegen_router_bwd): grad_logits [T, E] (logits
    dtype) from grad_probs [T, E] (logits dtype) and/or grad_weights [T, K]
    fp32, the forward's intermediate [T, E] fp32 and topk_indices [T, K].
    With both gradients it is the sum of the two backwards (the op is
    linear in the gradient; adding an all-zero one is exact)."""
    m = module_of(module)
    T = _check_router_bwd(m, grad_probs, grad_weights, intermediate, topk_indices)
    _check_contiguous(grad_probs=grad_probs, grad_weights=grad_weights,
                      intermediate=intermediate, topk_indices=topk_indices)
    h = m.handle(intermediate.device)
    code = lib.mgp_index_dtype(_INDEX_DTYPES[topk_indices.dtype].encode())
    out = None
    for gp, gw in ((grad_probs, None), (None, grad_weights)):
        if gp is None and gw is None:
            continue
        g = torch.empty(T, m.experts, dtype=m.logits_dtype, device=intermediate.device)
        m.check(lib.mgp_router_bwd(h, T, _ptr(gp), _ptr(gw), _ptr(intermediate), None, None,
                                   _ptr(topk_indices), code, _ptr(g),
                                   _stream(intermediate.device)), "moegen_router_bwd")
        out = g if out is None else out.add_(g)
    return out


def _check_router_bwd(m, grad_probs, grad_weights, intermediate, topk_indices):
    _check(intermediate.dim() == 2, "intermediate: [T, E] expected")
    T = intermediate.shape[0]
    _check(grad_probs is not None or grad_weights is not None,
           "router_bwd: give grad_probs, grad_weights or both")
    _check_tensor("intermediate", intermediate, (T, m.experts), torch.float32)
    _check_indices(m, T, topk_indices)
    if grad_probs is not None:
        _check_tensor("grad_probs", grad_probs, (T, m.experts), m.logits_dtype)
    if grad_weights is not None:
        _check_tensor("grad_weights", grad_weights, tuple(topk_indices.shape), torch.float32)
    return T


@router_bwd.register_fake
def _(module, grad_probs, grad_weights, intermediate, topk_indices):
    m = module_of(module)
    T = _check_router_bwd(m, grad_probs, grad_weights, intermediate, topk_indices)
    return intermediate.new_empty(T, m.experts, dtype=m.logits_dtype)


def _router_setup_context(ctx, inputs, output):
    ctx.module = inputs[0]
    ctx.save_for_backward(output[4], output[2])  # intermediate, topk_indices


def _router_backward(ctx, grad_probs, _routing, _idx, grad_weights, *_rest):
    inter, idx = ctx.saved_tensors
    gl = torch.ops.moegen.router_bwd(ctx.module, _contiguous(grad_probs),
                                     _contiguous(grad_weights), inter, idx)
    return None, gl, None, None


def _contiguous(t):
    return t.contiguous() if t is not None else None


torch.library.register_autograd("moegen::router_fwd", _router_backward,
                                setup_context=_router_setup_context)


# ---------------------------------------------------------------- permutation (SPEC.md 4)

_DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _dtype_code(t):
    _check(t.dtype in _DTYPE_NAMES, f"dtype {t.dtype}: expected fp32, bf16 or fp16")
    return lib.mgp_dtype(_DTYPE_NAMES[t.dtype].encode())


def _check_permute_fwd(m, x, topk_indices, routing_map, probs, expert_counts):
    _check(x.dim() == 2 and x.shape[1] == m.hidden, f"x: [T, H = {m.hidden}] expected, got "
           f"shape {tuple(x.shape)}")
    _check(x.dtype in _DTYPE_NAMES, f"x: dtype {x.dtype}, expected fp32, bf16 or fp16")
    T, E, K = x.shape[0], m.experts, m.topk
    _check((topk_indices is None) != (routing_map is None),
           "permute_fwd: give exactly one of topk_indices and routing_map")
    if topk_indices is not None:
        _check_tensor("topk_indices", topk_indices, (T, K), torch.int32)
    else:
        _check_tensor("routing_map", routing_map, (T, E), torch.bool)
    if probs is not None:
        _check_tensor("probs", probs, (T, K) if topk_indices is not None else (T, E),
                      torch.float32)
    if expert_counts is not None:
        _check_tensor("expert_counts", expert_counts, (E,), torch.int32)
    return T


def _permute_outputs(m, T, x, align, with_probs):
    s = lambda name: m.permute_shape(name, T, align)  # noqa: E731
    return (x.new_empty(s("rows")),
            x.new_empty(s("permuted_probs") if with_probs else (0,), dtype=torch.float32),
            x.new_empty(s("row_map"), dtype=torch.int32),
            x.new_empty(s("offsets"), dtype=torch.int32),
            x.new_empty(s("counts"), dtype=torch.int32))


@torch.library.custom_op("moegen::permute_fwd", mutates_args=(), device_types="cuda")
def permute_fwd(module: str, x: Tensor, topk_indices: Optional[Tensor],
                routing_map: Optional[Tensor], probs: Optional[Tensor],
                expert_counts: Optional[Tensor], align: int) -> Tuple[Tensor, Tensor, Tensor,
                                                                      Tensor, Tensor]:
    """moe_permute (moegen_permute_fwd, SPEC.md 4; no capacity): x [T, H]
    (fp32, bf16 or fp16) to expert-major rows [R, H] (R = T*K + E*(align -
    1)), routed by exactly one of topk_indices [T, K] int32 or routing_map
    [T, E] bool, with probs ([T, K] or [T, E] fp32, or None) permuted along
    and expert_counts [E] int32 (the router's, or None: counted here).
    align: 1 or a power of two <= 128 (each expert's rows padded with zero
    rows to a multiple). Returns rows, permuted_probs [R] fp32 ([0] without
    probs), row_map [T, K] int32 (the row of route (t, k)), offsets [E + 1]
    int32, counts [E] int32. Differentiable in x and probs."""
    m = module_of(module)
    T = _check_permute_fwd(m, x, topk_indices, routing_map, probs, expert_counts)
    _check_contiguous(x=x, topk_indices=topk_indices, routing_map=routing_map, probs=probs,
                      expert_counts=expert_counts)
    rows, pprobs, row_map, offsets, counts = _permute_outputs(m, T, x, align, probs is not None)
    (ws_bytes,) = m.permute_shape("workspace_bytes", T, align)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=x.device)
    h = m.handle(x.device)
    m.check(lib.mgp_permute_fwd(h, T, _dtype_code(x), _ptr(x), _ptr(topk_indices),
                                _ptr(routing_map), _ptr(probs), _ptr(expert_counts), align, 0,
                                _ptr(rows), _ptr(pprobs), _ptr(row_map), offsets.data_ptr(),
                                counts.data_ptr(), None, _ptr(ws), ws_bytes, _stream(x.device)),
            "moegen_permute_fwd")
    return rows, pprobs, row_map, offsets, counts


@permute_fwd.register_fake
def _(module, x, topk_indices, routing_map, probs, expert_counts, align):
    m = module_of(module)
    T = _check_permute_fwd(m, x, topk_indices, routing_map, probs, expert_counts)
    return _permute_outputs(m, T, x, align, probs is not None)


@torch.library.custom_op("moegen::permute_bwd", mutates_args=(), device_types="cuda")
def permute_bwd(module: str, grad_rows: Tensor, row_map: Tensor,
                grad_permuted_probs: Optional[Tensor],
                routing_map: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """Backward of permute_fwd (moegen_permute_bwd): grad_x [T, H] (the
    dtype of grad_rows [R, H]) = the sum of each token's route rows, and,
    with grad_permuted_probs [R] fp32, grad_probs [T, K] fp32 (indices
    routing) or [T, E] (routing_map [T, E] bool given); else grad_probs is
    [0]."""
    m = module_of(module)
    T = _check_permute_bwd(m, grad_rows, row_map, grad_permuted_probs, routing_map)
    _check_contiguous(grad_rows=grad_rows, row_map=row_map,
                      grad_permuted_probs=grad_permuted_probs, routing_map=routing_map)
    grad_x, grad_probs = _permute_bwd_outputs(m, T, grad_rows, grad_permuted_probs, routing_map)
    h = m.handle(grad_rows.device)
    m.check(lib.mgp_permute_bwd(h, T, _dtype_code(grad_rows), _ptr(grad_rows), _ptr(row_map),
                                _ptr(grad_x), _ptr(grad_permuted_probs), _ptr(routing_map),
                                _ptr(grad_probs), _stream(grad_rows.device)),
            "moegen_permute_bwd")
    return grad_x, grad_probs


def _check_permute_bwd(m, grad_rows, row_map, grad_permuted_probs, routing_map):
    _check(row_map.dim() == 2, "row_map: [T, K] expected")
    T = row_map.shape[0]
    _check_tensor("row_map", row_map, (T, m.topk), torch.int32)
    _check(grad_rows.dim() == 2 and grad_rows.shape[1] == m.hidden, "grad_rows: [R, H] expected")
    _check(grad_rows.dtype in _DTYPE_NAMES, f"grad_rows: dtype {grad_rows.dtype}")
    if grad_permuted_probs is not None:
        _check_tensor("grad_permuted_probs", grad_permuted_probs, (grad_rows.shape[0],),
                      torch.float32)
    if routing_map is not None:
        _check_tensor("routing_map", routing_map, (T, m.experts), torch.bool)
    return T


def _permute_bwd_outputs(m, T, grad_rows, grad_permuted_probs, routing_map):
    if grad_permuted_probs is None:
        gp_shape = (0,)
    else:
        gp_shape = (T, m.experts) if routing_map is not None else (T, m.topk)
    return (grad_rows.new_empty(T, m.hidden),
            grad_rows.new_empty(gp_shape, dtype=torch.float32))


@permute_bwd.register_fake
def _(module, grad_rows, row_map, grad_permuted_probs, routing_map):
    m = module_of(module)
    T = _check_permute_bwd(m, grad_rows, row_map, grad_permuted_probs, routing_map)
    return _permute_bwd_outputs(m, T, grad_rows, grad_permuted_probs, routing_map)


def _permute_setup_context(ctx, inputs, output):
    module, _x, _idx, routing_map, probs, _counts, _align = inputs
    ctx.module, ctx.has_probs = module, probs is not None
    ctx.save_for_backward(output[2], routing_map)


def _permute_backward(ctx, grad_rows, grad_pprobs, *_rest):
    row_map, routing_map = ctx.saved_tensors
    grad_x, grad_probs = torch.ops.moegen.permute_bwd(
        ctx.module, grad_rows.contiguous(), row_map,
        _contiguous(grad_pprobs) if ctx.has_probs else None, routing_map)
    return None, grad_x, None, None, grad_probs if ctx.has_probs else None, None, None


torch.library.register_autograd("moegen::permute_fwd", _permute_backward,
                                setup_context=_permute_setup_context)


def _check_unpermute(m, rows, row_map, offsets, counts, merging_probs):
    _check(row_map.dim() == 2, "row_map: [T, K] expected")
    T = row_map.shape[0]
    _check_tensor("row_map", row_map, (T, m.topk), torch.int32)
    _check(rows.dim() == 2 and rows.shape[1] == m.hidden, "rows: [R, H] expected")
    _check(rows.dtype in _DTYPE_NAMES, f"rows: dtype {rows.dtype}")
    _check_tensor("offsets", offsets, (m.experts + 1,), torch.int32)
    _check_tensor("counts", counts, (m.experts,), torch.int32)
    if merging_probs is not None:
        _check_tensor("merging_probs", merging_probs, (T, m.topk), torch.float32)
    return T


@torch.library.custom_op("moegen::unpermute_fwd", mutates_args=(), device_types="cuda")
def unpermute_fwd(module: str, rows: Tensor, row_map: Tensor, offsets: Tensor, counts: Tensor,
                  merging_probs: Optional[Tensor]) -> Tensor:
    """moe_unpermute (moegen_unpermute_fwd, SPEC.md 4b): out [T, H] (rows'
    dtype) = sum_k merging_probs[t, k] * rows[row_map[t, k]] (1 without
    merging_probs [T, K] fp32) over the routes with a row. offsets and
    counts (permute_fwd's) are what the backward needs. Differentiable in
    rows and merging_probs."""
    m = module_of(module)
    T = _check_unpermute(m, rows, row_map, offsets, counts, merging_probs)
    _check_contiguous(rows=rows, row_map=row_map, offsets=offsets, counts=counts,
                      merging_probs=merging_probs)
    out = rows.new_empty(T, m.hidden)
    h = m.handle(rows.device)
    m.check(lib.mgp_unpermute_fwd(h, T, _dtype_code(rows), _ptr(rows), _ptr(row_map),
                                  _ptr(merging_probs), _ptr(out), _stream(rows.device)),
            "moegen_unpermute_fwd")
    return out


@unpermute_fwd.register_fake
def _(module, rows, row_map, offsets, counts, merging_probs):
    m = module_of(module)
    T = _check_unpermute(m, rows, row_map, offsets, counts, merging_probs)
    return rows.new_empty(T, m.hidden)


@torch.library.custom_op("moegen::unpermute_bwd", mutates_args=(), device_types="cuda")
def unpermute_bwd(module: str, grad_out: Tensor, rows: Tensor, row_map: Tensor, offsets: Tensor,
                  counts: Tensor, merging_probs: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """Backward of unpermute_fwd (moegen_unpermute_bwd): grad_rows [R, H]
    (merging_probs[t, k] * grad_out[t] at route rows, zeros elsewhere) and,
    with merging_probs, grad_probs [T, K] fp32 = dot(grad_out[t],
    rows[row]) (else [0])."""
    m = module_of(module)
    T = _check_unpermute(m, rows, row_map, offsets, counts, merging_probs)
    _check_tensor("grad_out", grad_out, (T, m.hidden), rows.dtype)
    _check_contiguous(grad_out=grad_out, rows=rows, row_map=row_map, offsets=offsets,
                      counts=counts, merging_probs=merging_probs)
    grad_rows = torch.empty_like(rows)
    grad_probs = rows.new_empty((T, m.topk) if merging_probs is not None else (0,),
                                dtype=torch.float32)
    h = m.handle(rows.device)
    m.check(lib.mgp_unpermute_bwd(h, T, rows.shape[0], _dtype_code(rows), _ptr(grad_out),
                                  _ptr(row_map), offsets.data_ptr(), counts.data_ptr(),
                                  _ptr(merging_probs), _ptr(rows), _ptr(grad_rows),
                                  _ptr(grad_probs) if merging_probs is not None else None,
                                  _stream(rows.device)), "moegen_unpermute_bwd")
    return grad_rows, grad_probs


@unpermute_bwd.register_fake
def _(module, grad_out, rows, row_map, offsets, counts, merging_probs):
    m = module_of(module)
    T = _check_unpermute(m, rows, row_map, offsets, counts, merging_probs)
    _check_tensor("grad_out", grad_out, (T, m.hidden), rows.dtype)
    return (torch.empty_like(rows),
            rows.new_empty((T, m.topk) if merging_probs is not None else (0,),
                           dtype=torch.float32))


def _unpermute_setup_context(ctx, inputs, output):
    module, rows, row_map, offsets, counts, merging_probs = inputs
    ctx.module, ctx.has_probs = module, merging_probs is not None
    ctx.save_for_backward(rows, row_map, offsets, counts, merging_probs)


def _unpermute_backward(ctx, grad_out):
    rows, row_map, offsets, counts, merging_probs = ctx.saved_tensors
    grad_rows, grad_probs = torch.ops.moegen.unpermute_bwd(ctx.module, grad_out.contiguous(),
                                                           rows, row_map, offsets, counts,
                                                           merging_probs)
    return None, grad_rows, None, None, None, grad_probs if ctx.has_probs else None


torch.library.register_autograd("moegen::unpermute_fwd", _unpermute_backward,
                                setup_context=_unpermute_setup_context)


def _check_sort_chunks(m, x, split_sizes, sorted_index, probs):
    _check(x.dim() == 2 and x.shape[1] == m.hidden, f"x: [N, H = {m.hidden}] expected")
    _check(x.dtype in _DTYPE_NAMES, f"x: dtype {x.dtype}")
    _check(split_sizes.dim() == 1 and split_sizes.dtype == torch.int32,
           "split_sizes: [S] int32 expected")
    _check_tensor("sorted_index", sorted_index, tuple(split_sizes.shape), torch.int32)
    if probs is not None:
        _check_tensor("probs", probs, (x.shape[0],), torch.float32)
    return x.shape[0]


def _sort_chunks_outputs(x, probs, backward):
    N = x.shape[0]
    return (torch.empty_like(x), x.new_empty((N,) if probs is not None else (0,),
                                             dtype=torch.float32),
            x.new_empty((0,) if backward else (N,), dtype=torch.int32))


@torch.library.custom_op("moegen::sort_chunks", mutates_args=(), device_types="cuda")
def sort_chunks(module: str, x: Tensor, split_sizes: Tensor, sorted_index: Tensor,
                probs: Optional[Tensor], backward: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """moe_sort_chunks_by_index (moegen_sort_chunks, SPEC.md 4f): x [N, H]
    cut into chunks of split_sizes [S] int32 rows (device), put out in the
    order sorted_index [S] int32 (a permutation of [0, S)); rows past the
    chunks stay in place. backward = True applies the inverse. Returns out
    [N, H], out_probs [N] fp32 (probs [N] moved along; [0] without probs)
    and row_map [N] int32 (each input row's destination; [0] when
    backward). Differentiable in x and probs (the backward is the inverse
    sort)."""
    m = module_of(module)
    N = _check_sort_chunks(m, x, split_sizes, sorted_index, probs)
    _check_contiguous(x=x, split_sizes=split_sizes, sorted_index=sorted_index, probs=probs)
    out, out_probs, row_map = _sort_chunks_outputs(x, probs, backward)
    h = m.handle(x.device)
    m.check(lib.mgp_sort_chunks(h, N, _dtype_code(x), split_sizes.shape[0], _ptr(split_sizes),
                                _ptr(sorted_index), _ptr(x), _ptr(out), _ptr(probs),
                                _ptr(out_probs), _ptr(row_map), int(backward),
                                _stream(x.device)), "moegen_sort_chunks")
    return out, out_probs, row_map


@sort_chunks.register_fake
def _(module, x, split_sizes, sorted_index, probs, backward):
    _check_sort_chunks(module_of(module), x, split_sizes, sorted_index, probs)
    return _sort_chunks_outputs(x, probs, backward)


def _sort_chunks_setup_context(ctx, inputs, output):
    module, _x, split_sizes, sorted_index, probs, backward = inputs
    ctx.module, ctx.backward, ctx.has_probs = module, backward, probs is not None
    ctx.save_for_backward(split_sizes, sorted_index)


def _sort_chunks_backward(ctx, grad_out, grad_probs, _grad_map):
    split_sizes, sorted_index = ctx.saved_tensors
    gx, gp, _ = torch.ops.moegen.sort_chunks(ctx.module, grad_out.contiguous(), split_sizes,
                                             sorted_index,
                                             _contiguous(grad_probs) if ctx.has_probs else None,
                                             not ctx.backward)
    return None, gx, None, None, gp if ctx.has_probs else None, None


torch.library.register_autograd("moegen::sort_chunks", _sort_chunks_backward,
                                setup_context=_sort_chunks_setup_context)


# ---------------------------------------------------------------- grouped GEMM (SPEC.md 5)


def _check_gemm(m, which, w, counts, offsets, **rows):
    """Checks which, w, the expert split and each of `rows` (name=tensor:
    "x" [M, K], "y" [M, N] as the shape function names them, M its rows);
    returns M."""
    _check(which in (1, 2), f"which = {which}: 1 (gate/up, N = 2F, K = H) or 2 (down, N = H, "
           "K = F)")
    M = None
    for name, t in rows.items():
        _check(t.dim() == 2, f"{name}: [rows, ...] expected, got shape {tuple(t.shape)}")
        M = t.shape[0] if M is None else M
        kind = "x" if name in ("x", "dx") else "y"
        _check_tensor(name, t, m.gemm_shape(which, kind, M), m.dtype)
    _check_tensor("w", w, m.gemm_shape(which, "w", M), m.dtype)
    _check((counts is None) != (offsets is None), "give exactly one of counts and offsets")
    if counts is not None:
        _check_tensor("counts", counts, (m.experts,), torch.int32)
    else:
        _check_tensor("offsets", offsets, (m.experts + 1,), torch.int32)
    return M


@torch.library.custom_op("moegen::gemm_fwd", mutates_args=(), device_types="cuda")
def gemm_fwd(module: str, which: int, x: Tensor, w: Tensor, counts: Optional[Tensor],
             offsets: Optional[Tensor]) -> Tensor:
    """The grouped GEMM (moegen_gemm_fwd): y_e = x_e w_e^T for each expert
    e's rows of x [M, K] bf16 (rows grouped by expert: counts [E] int32 or
    offsets [E + 1] int32, read on the device), w [E, N, K] bf16; which = 1
    (w1: N = 2F, K = H) or 2 (w2: N = H, K = F). Returns y [M, N] bf16,
    zero on rows outside every expert. Differentiable in x and w (dgrad,
    wgrad)."""
    m = module_of(module)
    M = _check_gemm(m, which, w, counts, offsets, x=x)
    _check_contiguous(x=x, w=w, counts=counts, offsets=offsets)
    y = torch.zeros(m.gemm_shape(which, "y", M), dtype=m.dtype, device=x.device)
    (ws_bytes,) = m.gemm_shape(which, "workspace_bytes", M)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=x.device)
    h = m.handle(x.device)
    m.check(lib.mgp_gemm_fwd(h, which, M, _ptr(x), _ptr(w), _ptr(y), _ptr(counts), _ptr(offsets),
                             _ptr(ws), ws_bytes, _stream(x.device)), "moegen_gemm_fwd")
    return y


@gemm_fwd.register_fake
def _(module, which, x, w, counts, offsets):
    m = module_of(module)
    M = _check_gemm(m, which, w, counts, offsets, x=x)
    return x.new_empty(m.gemm_shape(which, "y", M))


@torch.library.custom_op("moegen::gemm_dgrad", mutates_args=(), device_types="cuda")
def gemm_dgrad(module: str, which: int, dy: Tensor, w: Tensor, counts: Optional[Tensor],
               offsets: Optional[Tensor]) -> Tensor:
    """dgrad of gemm_fwd (moegen_gemm_dgrad): dx_e = dy_e w_e for dy [M, N]
    bf16; returns dx [M, K] bf16, zero on rows outside every expert."""
    m = module_of(module)
    M = _check_gemm(m, which, w, counts, offsets, dy=dy)
    _check_contiguous(dy=dy, w=w, counts=counts, offsets=offsets)
    dx = torch.zeros(m.gemm_shape(which, "x", M), dtype=m.dtype, device=dy.device)
    (ws_bytes,) = m.gemm_shape(which, "workspace_bytes", M)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=dy.device)
    h = m.handle(dy.device)
    m.check(lib.mgp_gemm_dgrad(h, which, M, _ptr(dy), _ptr(w), _ptr(dx), _ptr(counts),
                               _ptr(offsets), _ptr(ws), ws_bytes, _stream(dy.device)),
            "moegen_gemm_dgrad")
    return dx


@gemm_dgrad.register_fake
def _(module, which, dy, w, counts, offsets):
    m = module_of(module)
    M = _check_gemm(m, which, w, counts, offsets, dy=dy)
    return dy.new_empty(m.gemm_shape(which, "x", M))


@torch.library.custom_op("moegen::gemm_wgrad", mutates_args=(), device_types="cuda")
def gemm_wgrad(module: str, which: int, dy: Tensor, x: Tensor, counts: Optional[Tensor],
               offsets: Optional[Tensor]) -> Tensor:
    """wgrad of gemm_fwd (moegen_gemm_wgrad): dw_e = dy_e^T x_e; returns dw
    [E, N, K] bf16 (an expert with no rows gets zeros)."""
    m = module_of(module)
    M = _check_gemm_wgrad(m, which, dy, x, counts, offsets)
    _check_contiguous(dy=dy, x=x, counts=counts, offsets=offsets)
    dw = torch.empty(m.gemm_shape(which, "w", M), dtype=m.dtype, device=x.device)
    h = m.handle(x.device)
    m.check(lib.mgp_gemm_wgrad(h, which, M, _ptr(dy), _ptr(x), _ptr(dw), _ptr(counts),
                               _ptr(offsets), _stream(x.device)), "moegen_gemm_wgrad")
    return dw


def _check_gemm_wgrad(m, which, dy, x, counts, offsets):
    _check(which in (1, 2), f"which = {which}: 1 or 2")
    _check(x.dim() == 2 and dy.dim() == 2 and dy.shape[0] == x.shape[0],
           "x [rows, K] and dy [rows, N] with the same rows expected")
    M = x.shape[0]
    _check_tensor("x", x, m.gemm_shape(which, "x", M), m.dtype)
    _check_tensor("dy", dy, m.gemm_shape(which, "y", M), m.dtype)
    _check((counts is None) != (offsets is None), "give exactly one of counts and offsets")
    if counts is not None:
        _check_tensor("counts", counts, (m.experts,), torch.int32)
    else:
        _check_tensor("offsets", offsets, (m.experts + 1,), torch.int32)
    return M


@gemm_wgrad.register_fake
def _(module, which, dy, x, counts, offsets):
    m = module_of(module)
    M = _check_gemm_wgrad(m, which, dy, x, counts, offsets)
    return x.new_empty(m.gemm_shape(which, "w", M))


def _gemm_setup_context(ctx, inputs, output):
    module, which, x, w, counts, offsets = inputs
    ctx.module, ctx.which = module, which
    ctx.save_for_backward(x, w, counts, offsets)


def _gemm_backward(ctx, dy):
    x, w, counts, offsets = ctx.saved_tensors
    dy = dy.contiguous()
    dx = dw = None
    if ctx.needs_input_grad[2]:
        dx = torch.ops.moegen.gemm_dgrad(ctx.module, ctx.which, dy, w, counts, offsets)
    if ctx.needs_input_grad[3]:
        dw = torch.ops.moegen.gemm_wgrad(ctx.module, ctx.which, dy, x, counts, offsets)
    return None, None, dx, dw, None, None


torch.library.register_autograd("moegen::gemm_fwd", _gemm_backward,
                                setup_context=_gemm_setup_context)


# ---------------------------------------------------------------- aux loss (SPEC.md 2)


@torch.library.custom_op("moegen::aux_scores_fwd", mutates_args=(), device_types="cuda")
def aux_scores_fwd(module: str, logits: Tensor,
                   routing_map_format: str) -> Tuple[Tensor, Tensor, Tensor]:
    """fused_compute_score_for_moe_aux_loss (moegen_aux_scores_fwd, SPEC.md
    2a) on logits [T, E]: scores [T, E] fp32 over all E (no bias, no
    groups), the top-K routing map (bytemap bool [T, E] or bitmap uint8 [T,
    ceil(E/8)]) and intermediate [T, E] fp32. Differentiable in logits
    through scores."""
    m = module_of(module)
    T = _check_aux_scores(m, logits, routing_map_format)
    _check_contiguous(logits=logits)
    scores, routing, inter = _aux_scores_outputs(m, T, logits, routing_map_format)
    bytemap = routing if routing_map_format == "bytemap" else None
    bitmap = routing if routing_map_format == "bitmap" else None
    h = m.handle(logits.device)
    m.check(lib.mgp_aux_scores_fwd(h, T, _ptr(logits), _ptr(scores), _ptr(bytemap), _ptr(bitmap),
                                   _ptr(inter), _stream(logits.device)), "moegen_aux_scores_fwd")
    return scores, routing, inter


def _check_aux_scores(m, logits, routing_map_format):
    _check(routing_map_format in _ROUTING_FORMATS,
           f"routing_map_format: {routing_map_format!r}, expected one of {_ROUTING_FORMATS}")
    _check(logits.dim() == 2, "logits: [T, E] expected")
    T = logits.shape[0]
    _check_tensor("logits", logits, (T, m.experts), m.logits_dtype)
    return T


def _aux_scores_outputs(m, T, like, routing_map_format):
    s = lambda name: m.aux_scores_shape(name, T)  # noqa: E731
    if routing_map_format == "bytemap":
        routing = like.new_empty(s("routing_map"), dtype=torch.bool)
    else:
        routing = like.new_empty(s("routing_bitmap"), dtype=torch.uint8)
    return (like.new_empty(s("scores"), dtype=torch.float32), routing,
            like.new_empty(s("intermediate"), dtype=torch.float32))


@aux_scores_fwd.register_fake
def _(module, logits, routing_map_format):
    m = module_of(module)
    T = _check_aux_scores(m, logits, routing_map_format)
    return _aux_scores_outputs(m, T, logits, routing_map_format)


@torch.library.custom_op("moegen::aux_scores_bwd", mutates_args=(), device_types="cuda")
def aux_scores_bwd(module: str, grad_scores: Tensor, intermediate: Tensor) -> Tensor:
    """Backward of aux_scores_fwd (moegen_aux_scores_bwd): grad_logits [T, E]
    (logits dtype) from grad_scores [T, E] fp32 and the intermediate."""
    m = module_of(module)
    T = _check_aux_scores_bwd(m, grad_scores, intermediate)
    _check_contiguous(grad_scores=grad_scores, intermediate=intermediate)
    gl = grad_scores.new_empty(m.aux_scores_shape("grad_logits", T), dtype=m.logits_dtype)
    h = m.handle(grad_scores.device)
    m.check(lib.mgp_aux_scores_bwd(h, T, _ptr(grad_scores), _ptr(intermediate), _ptr(gl),
                                   _stream(grad_scores.device)), "moegen_aux_scores_bwd")
    return gl


def _check_aux_scores_bwd(m, grad_scores, intermediate):
    _check(intermediate.dim() == 2, "intermediate: [T, E] expected")
    T = intermediate.shape[0]
    _check_tensor("intermediate", intermediate, (T, m.experts), torch.float32)
    _check_tensor("grad_scores", grad_scores, (T, m.experts), torch.float32)
    return T


@aux_scores_bwd.register_fake
def _(module, grad_scores, intermediate):
    m = module_of(module)
    T = _check_aux_scores_bwd(m, grad_scores, intermediate)
    return grad_scores.new_empty(m.aux_scores_shape("grad_logits", T), dtype=m.logits_dtype)


def _aux_scores_setup_context(ctx, inputs, output):
    ctx.module = inputs[0]
    ctx.save_for_backward(output[2])


def _aux_scores_backward(ctx, grad_scores, *_rest):
    (inter,) = ctx.saved_tensors
    return None, torch.ops.moegen.aux_scores_bwd(ctx.module, grad_scores.contiguous(), inter), None


torch.library.register_autograd("moegen::aux_scores_fwd", _aux_scores_backward,
                                setup_context=_aux_scores_setup_context)

_COUNT_DTYPES = {torch.int32: "int32", torch.int64: "int64", torch.float32: "fp32",
                 torch.bfloat16: "bf16", torch.int16: "int16"}


def _check_aux_loss(probs, tokens_per_expert, total_num_tokens, num_experts, topk):
    _check(probs.dim() == 2, "probs: [R, C] expected")
    _check(probs.dtype in _DTYPE_NAMES, f"probs: dtype {probs.dtype}")
    C = probs.shape[1]
    _check(tokens_per_expert.dtype in _COUNT_DTYPES,
           f"tokens_per_expert: dtype {tokens_per_expert.dtype}, expected one of "
           f"{list(_COUNT_DTYPES)}")
    _check(tuple(tokens_per_expert.shape) == (C,), "tokens_per_expert: [C] expected")
    _check_tensor("total_num_tokens", total_num_tokens, (), torch.int64)
    _check(num_experts > 0 and C % num_experts == 0 and topk > 0,
           f"num_experts = {num_experts} must divide C = {C}; topk = {topk} > 0")


@torch.library.custom_op("moegen::aux_loss_fwd", mutates_args=(), device_types="cuda")
def aux_loss_fwd(module: str, probs: Tensor, tokens_per_expert: Tensor, total_num_tokens: Tensor,
                 num_experts: int, topk: int, coeff: float) -> Tuple[Tensor, Tensor]:
    """fused_moe_aux_loss (moegen_aux_loss_fwd, SPEC.md 2b): aux_loss []
    (probs' dtype) = Cc * sum_c tokens_per_expert[c] * sum_r probs[r, c]
    with Cc = E*coeff/topk/N/N, for probs [R, C] (fp32, bf16, fp16),
    tokens_per_expert [C] (int32, int64, fp32, bf16, int16) and N =
    total_num_tokens, a [] int64 CUDA tensor read when the kernel runs (one
    captured graph serves any N). Also returns aux_const [] fp32 (Cc).
    Deterministic. Differentiable in probs."""
    m = module_of(module)
    _check_aux_loss(probs, tokens_per_expert, total_num_tokens, num_experts, topk)
    _check_contiguous(probs=probs, tokens_per_expert=tokens_per_expert,
                      total_num_tokens=total_num_tokens)
    R, C = probs.shape
    loss = probs.new_empty(())
    aux_const = probs.new_empty((), dtype=torch.float32)
    ws_bytes = m.aux_loss_workspace(R, C)
    ws = torch.empty(ws_bytes, dtype=torch.uint8, device=probs.device)
    h = m.handle(probs.device)
    m.check(lib.mgp_aux_loss_fwd(h, R, C, _ptr(probs), _dtype_code(probs),
                                 _ptr(tokens_per_expert),
                                 lib.mgp_count_dtype(_COUNT_DTYPES[tokens_per_expert.dtype].encode()),
                                 total_num_tokens.data_ptr(), num_experts, topk, coeff,
                                 loss.data_ptr(), aux_const.data_ptr(), _ptr(ws), ws_bytes,
                                 _stream(probs.device)), "moegen_aux_loss_fwd")
    return loss, aux_const


@aux_loss_fwd.register_fake
def _(module, probs, tokens_per_expert, total_num_tokens, num_experts, topk, coeff):
    _check_aux_loss(probs, tokens_per_expert, total_num_tokens, num_experts, topk)
    return probs.new_empty(()), probs.new_empty((), dtype=torch.float32)


@torch.library.custom_op("moegen::aux_loss_bwd", mutates_args=(), device_types="cuda")
def aux_loss_bwd(module: str, aux_const: Tensor, tokens_per_expert: Tensor, grad_aux: Tensor,
                 rows: int) -> Tensor:
    """Backward of aux_loss_fwd (moegen_aux_loss_bwd): grad_probs [rows, C]
    (grad_aux's dtype) = Cc * tokens_per_expert[c] * grad_aux."""
    m = module_of(module)
    C = _check_aux_loss_bwd(aux_const, tokens_per_expert, grad_aux)
    _check_contiguous(aux_const=aux_const, tokens_per_expert=tokens_per_expert,
                      grad_aux=grad_aux)
    gp = grad_aux.new_empty(rows, C)
    h = m.handle(grad_aux.device)
    m.check(lib.mgp_aux_loss_bwd(h, rows, C, aux_const.data_ptr(), _ptr(tokens_per_expert),
                                 lib.mgp_count_dtype(_COUNT_DTYPES[tokens_per_expert.dtype].encode()),
                                 grad_aux.data_ptr(), _dtype_code(grad_aux), _ptr(gp),
                                 _stream(grad_aux.device)), "moegen_aux_loss_bwd")
    return gp


def _check_aux_loss_bwd(aux_const, tokens_per_expert, grad_aux):
    _check_tensor("aux_const", aux_const, (), torch.float32)
    _check(tokens_per_expert.dim() == 1 and tokens_per_expert.dtype in _COUNT_DTYPES,
           "tokens_per_expert: [C] of a count dtype expected")
    _check(grad_aux.dim() == 0 and grad_aux.dtype in _DTYPE_NAMES, "grad_aux: [] expected")
    return tokens_per_expert.shape[0]


@aux_loss_bwd.register_fake
def _(module, aux_const, tokens_per_expert, grad_aux, rows):
    C = _check_aux_loss_bwd(aux_const, tokens_per_expert, grad_aux)
    return grad_aux.new_empty(rows, C)


def _aux_loss_setup_context(ctx, inputs, output):
    ctx.module, ctx.rows = inputs[0], inputs[1].shape[0]
    ctx.save_for_backward(output[1], inputs[2])


def _aux_loss_backward(ctx, grad_aux, _grad_const):
    aux_const, tpe = ctx.saved_tensors
    gp = torch.ops.moegen.aux_loss_bwd(ctx.module, aux_const, tpe, grad_aux.contiguous(),
                                       ctx.rows)
    return None, gp, None, None, None, None, None


torch.library.register_autograd("moegen::aux_loss_fwd", _aux_loss_backward,
                                setup_context=_aux_loss_setup_context)

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
    for name, t in tensors.items():
        if t is not None:
            _check(t.is_contiguous(), f"{name}: must be contiguous")
            _check(t.is_cuda, f"{name}: must be a CUDA tensor")


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

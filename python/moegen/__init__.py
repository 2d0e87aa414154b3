"""moegen from PyTorch: moegen's generated MoE kernels as torch.library
custom ops (moegen::layer_fwd / _bwd, router_fwd, router_fwd_into,
router_bwd, aux_scores_fwd / _bwd, aux_loss_fwd / _bwd, permute_fwd / _bwd,
unpermute_fwd / _bwd, sort_chunks, gemm_fwd, gemm_dgrad, gemm_wgrad: see
ops.py) with fake kernels from the C shape functions and registered
autograd, so torch.compile(fullgraph=True) traces them; moegen.MoE, an
nn.Module over the layer; moegen.Module, the JIT module of a config.

    import moegen
    moe = moegen.MoE("qwen3-30b-a3b", device="cuda")
    y = moe(x, logits)          # x [T, H] bf16, logits [T, E]
"""
from . import ops
from ._lib import MoegenError
from .module import Module, preset_names
from .moe import MoE

__all__ = ["MoE", "Module", "MoegenError", "ops", "preset_names"]

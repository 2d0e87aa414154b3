"""moegen from PyTorch: moegen's generated MoE kernels as torch.library
custom ops (moegen::layer_fwd, moegen::layer_bwd) with fake kernels from
the C shape functions and registered autograd, so torch.compile(fullgraph=True)
traces them; moegen.MoE, an nn.Module over them; moegen.Module, the JIT
module of a config.

    import moegen
    moe = moegen.MoE("qwen3-30b-a3b", device="cuda")
    y = moe(x, logits)          # x [T, H] bf16, logits [T, E]
"""
from . import ops
from ._lib import MoegenError
from .module import Module, preset_names
from .moe import MoE

__all__ = ["MoE", "Module", "MoegenError", "ops", "preset_names"]

"""moegen.MoE: the routed experts of a MoE layer as an nn.Module whose
forward is the moegen::layer_fwd op (and whose backward, through autograd,
is moegen::layer_bwd)."""
import math

import torch
from torch import nn

from . import ops  # noqa: F401  (registers the moegen:: ops)
from .module import Module


class MoE(nn.Module):
    """The routed experts of a MoE layer, from `config` (a preset name, a
    Hugging Face config.json path, a Lua file or a dict: see Module).

    Parameters, in moegen's layout (bf16): w1 [E, 2F, H] (rows [0, F) the
    gate projection, [F, 2F) the up projection, nn.Linear's [out, in] per
    expert) and w2 [E, H, F] (down). A config with an expert bias has the
    buffer expert_bias [E] fp32 (used for the selection only, no gradient,
    as in TransformerEngine; the caller updates it). forward(x [T, H] bf16,
    logits [T, E] in the config's logits dtype) -> y [T, H] bf16: the
    router (score function, groups, bias, scaling), the experts' SwiGLU
    MLPs and the weighted sum over each token's top-k experts. The router's
    gate projection (logits = x @ gate^T) and shared experts are the
    caller's. Memory for the forward's saved state and both ops' scratch is
    sized by the C shape function for each call's T."""

    def __init__(self, config, *, device=None, arch=None):
        super().__init__()
        self.module = Module(config, arch=arch)
        m = self.module
        kw = dict(device=device, dtype=m.dtype)
        self.w1 = nn.Parameter(torch.empty(m.experts, 2 * m.ffn, m.hidden, **kw))
        self.w2 = nn.Parameter(torch.empty(m.experts, m.hidden, m.ffn, **kw))
        if m.expert_bias:
            self.register_buffer("expert_bias", torch.zeros(m.experts, device=device))
        else:
            self.expert_bias = None
        self.reset_parameters()

    def reset_parameters(self):
        """w1 ~ N(0, 1/H), w2 ~ N(0, 1/F) (nn.Linear-like fan-in scaling)."""
        with torch.no_grad():
            self.w1.normal_(0.0, 1.0 / math.sqrt(self.module.hidden))
            self.w2.normal_(0.0, 1.0 / math.sqrt(self.module.ffn))

    def extra_repr(self):
        m = self.module
        return f"experts={m.experts}, topk={m.topk}, hidden={m.hidden}, ffn={m.ffn}"

    def forward(self, x, logits):
        y, _saved = torch.ops.moegen.layer_fwd(self.module.key, x, logits, self.expert_bias,
                                               self.w1, self.w2)
        return y

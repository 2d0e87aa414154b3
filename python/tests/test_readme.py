"""The README's "From PyTorch" example, run as written (GPU; it JITs the
qwen3-30b-a3b preset at its real shapes)."""
import os
import re

import torch

from conftest import REPO, needs_cuda


@needs_cuda
def test_readme_example():
    text = open(os.path.join(REPO, "README.md")).read()
    section = text[text.index("**4. From PyTorch.**"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    moe, gate = scope["moe"], scope["gate"]
    assert all(p.grad is None for p in [*moe.parameters(), *gate.parameters()])  # zero_grad ran
    loss = scope["loss_fn"](scope["x"])
    assert torch.isfinite(loss).item()

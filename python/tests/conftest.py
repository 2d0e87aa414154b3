"""Shared fixtures of the moegen Python tests: small configs (JIT in
seconds) and the CUDA skip."""
import os

import pytest
import torch

import moegen

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(REPO, "tests", "data", "models")

# DeepSeek-V3-like routing (sigmoid, groups, expert bias, scaling) and a
# Mixtral-like one (post-softmax, fp32 logits), at small sizes that are not
# tile multiples and E not a power of two where the config allows it.
SIGMOID = dict(name="pysig", experts=24, topk=4, groups=4, group_topk=2, score="sigmoid",
               expert_bias=True, scaling=2.5, hidden=264, ffn=136, logits_dtype="bf16")
SOFTMAX = dict(name="pysoft", experts=6, topk=2, score="softmax", hidden=264, ffn=136,
               logits_dtype="fp32")
# Quantile balancing (SPEC.md 3): sigmoid + bias, a histogram the router accumulates.
QB = dict(name="pyqb", experts=16, topk=2, score="sigmoid", expert_bias=True,
          quantile_balancing=True, hidden=264, ffn=136, logits_dtype="fp32")

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="session")
def sig_module():
    return moegen.Module(SIGMOID)


@pytest.fixture(scope="session")
def soft_module():
    return moegen.Module(SOFTMAX)

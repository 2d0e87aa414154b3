"""What needs no GPU: configs from every source, the C shape functions and
the affine saved-size bound, the ops' schemas, and their fake kernels (meta
tensors, symbolic T under make_fx, opcheck's schema and fake checks)."""
import os

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import moegen
from conftest import MODELS, QB, SIGMOID, SOFTMAX


def meta_inputs(m, T):
    kw = dict(device="meta")
    x = torch.empty(T, m.hidden, dtype=m.dtype, **kw)
    logits = torch.empty(T, m.experts, dtype=m.logits_dtype, **kw)
    bias = torch.empty(m.experts, dtype=torch.float32, **kw) if m.expert_bias else None
    w1 = torch.empty(m.experts, 2 * m.ffn, m.hidden, dtype=m.dtype, **kw)
    w2 = torch.empty(m.experts, m.hidden, m.ffn, dtype=m.dtype, **kw)
    return x, logits, bias, w1, w2


def test_config_sources(tmp_path):
    p = moegen.Module("deepseek-v3")
    assert (p.experts, p.topk, p.hidden, p.ffn, p.expert_bias) == (256, 8, 7168, 2048, True)
    hf = moegen.Module(os.path.join(MODELS, "deepseek-v3.json"))
    assert (hf.experts, hf.topk, hf.hidden, hf.ffn) == (256, 8, 7168, 2048)
    lua = tmp_path / "my.lua"
    lua.write_text("return { experts = 64, topk = 6, hidden = 2048, ffn = 1408, "
                   "score = 'softmax', pre_softmax = true, logits_dtype = 'fp32' }\n")
    lm = moegen.Module(lua)
    assert (lm.experts, lm.topk, lm.logits_dtype) == (64, 6, torch.float32)
    d = moegen.Module(dict(preset="qwen3-30b-a3b", hidden=256, ffn=128))
    assert (d.experts, d.topk, d.hidden, d.ffn) == (128, 8, 256, 128)
    assert moegen.Module(SOFTMAX).logits_dtype == torch.float32
    assert "deepseek-v3" in moegen.preset_names()
    assert d.key != moegen.Module("qwen3-30b-a3b").key
    assert d.key == moegen.Module(dict(preset="qwen3-30b-a3b", hidden=256, ffn=128)).key


@pytest.mark.parametrize("config, message", [
    ("no-such-preset", "no-such-preset"),
    (dict(experts=8, topk=9, hidden=64, ffn=64), "topk"),
    (dict(experts=8, topk=2, hidden=64, ffn=64, bogus=1), "bogus: unknown config key"),
    (dict(preset="mixtral-8x7b", expert_bias=True), "expert_bias"),
])
def test_config_errors(config, message):
    with pytest.raises(ValueError, match=message):
        moegen.Module(config)


def test_config_type():
    with pytest.raises(TypeError, match="preset name"):
        moegen.Module(3)


@pytest.mark.parametrize("config", [SIGMOID, SOFTMAX, "deepseek-v3"])
def test_saved_bound(config):
    m = moegen.Module(config)
    for T in list(range(0, 600)) + [1024, 3000, 4096, 8191, 8192, 16384, 65537]:
        saved, ws = m.layer_bytes(T)
        bound = m.layer_saved_size(T)
        assert saved <= bound < saved + 64 * 256, (T, saved, bound)
        assert ws > 0 or T == 0


def test_schemas():
    fwd = str(torch.ops.moegen.layer_fwd.default._schema)
    bwd = str(torch.ops.moegen.layer_bwd.default._schema)
    assert fwd == ("moegen::layer_fwd(str module, Tensor x, Tensor logits, Tensor? expert_bias, "
                   "Tensor w1, Tensor w2) -> (Tensor, Tensor)")
    assert bwd == ("moegen::layer_bwd(str module, Tensor dy, Tensor w1, Tensor w2, "
                   "Tensor saved) -> (Tensor, Tensor, Tensor, Tensor)")
    # No op mutates an input (alias info would show as Tensor(a!)).
    assert "!" not in fwd + bwd


@pytest.mark.parametrize("config", [SIGMOID, SOFTMAX])
@pytest.mark.parametrize("T", [0, 1, 333, 4096])
def test_fake_shapes(config, T):
    m = moegen.Module(config)
    x, logits, bias, w1, w2 = meta_inputs(m, T)
    y, saved = torch.ops.moegen.layer_fwd(m.key, x, logits, bias, w1, w2)
    assert (y.shape, y.dtype) == ((T, m.hidden), m.dtype)
    assert (saved.shape, saved.dtype) == ((m.layer_saved_size(T),), torch.uint8)
    dx, dlogits, dw1, dw2 = torch.ops.moegen.layer_bwd(m.key, y, w1, w2, saved)
    assert (dx.shape, dx.dtype) == ((T, m.hidden), m.dtype)
    assert (dlogits.shape, dlogits.dtype) == ((T, m.experts), m.logits_dtype)
    assert dw1.shape == w1.shape and dw2.shape == w2.shape and dw1.dtype == m.dtype


def test_fake_checks(sig_module):
    m = sig_module
    x, logits, bias, w1, w2 = meta_inputs(m, 8)
    with pytest.raises(ValueError, match="logits: shape"):
        torch.ops.moegen.layer_fwd(m.key, x, logits[:4], bias, w1, w2)
    with pytest.raises(ValueError, match="expert_bias"):
        torch.ops.moegen.layer_fwd(m.key, x, logits, None, w1, w2)
    with pytest.raises(ValueError, match="x: dtype"):
        torch.ops.moegen.layer_fwd(m.key, x.float(), logits, bias, w1, w2)
    with pytest.raises(ValueError, match="no module with key"):
        torch.ops.moegen.layer_fwd("nope", x, logits, bias, w1, w2)


def test_symbolic_T(sig_module):
    """Under symbolic tracing T stays a symbol: y is [s0, H], saved a*s0 + b."""
    m = sig_module

    def f(x, logits, bias, w1, w2):
        y, saved = torch.ops.moegen.layer_fwd(m.key, x, logits, bias, w1, w2)
        return torch.ops.moegen.layer_bwd(m.key, y, w1, w2, saved)

    g = make_fx(f, tracing_mode="symbolic")(*meta_inputs(m, 1000))
    nodes = {n.name: n for n in g.graph.nodes}
    y_val = nodes["getitem"].meta["val"]
    saved_val = nodes["getitem_1"].meta["val"]
    T = y_val.shape[0]
    assert isinstance(T, torch.SymInt) and y_val.shape[1] == m.hidden
    a, b = m._saved_affine()
    assert str(saved_val.shape[0]).replace(" ", "") == f"{a}*{T}+{b}"


def test_opcheck_fake(sig_module):
    """opcheck's schema and fake checks on meta tensors (the CUDA run is test_gpu's)."""
    m = sig_module
    torch.library.opcheck(torch.ops.moegen.layer_fwd.default, (m.key, *meta_inputs(m, 77)),
                          test_utils=("test_schema", "test_faketensor"))


def test_compile_meta():
    """Dynamo + AOTAutograd over the fake kernels (meta tensors run them as
    the real ones): fullgraph, no graph break, one graph for five T with T
    dynamic, the backward through moegen::layer_bwd."""
    from torch._dynamo.utils import counters

    moe = moegen.MoE(SIGMOID, device="meta")
    m = moe.module

    def step(x, logits):
        return moe(x, logits).float().sum()

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for T in [1024, 2048, 3000, 4096, 8192]:
        x = torch.empty(T, m.hidden, dtype=m.dtype, device="meta", requires_grad=True)
        logits = torch.empty(T, m.experts, dtype=m.logits_dtype, device="meta",
                             requires_grad=True)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(logits, 0)
        compiled(x, logits).backward()
        assert x.grad.shape == x.shape and logits.grad.shape == logits.shape
        assert moe.w1.grad.shape == moe.w1.shape
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


def test_router_schemas():
    assert str(torch.ops.moegen.router_fwd.default._schema) == (
        "moegen::router_fwd(str module, Tensor logits, Tensor? expert_bias, str routing_map_format)"
        " -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
    # The two in-place writes are declared: the index buffer and the QB histogram.
    assert str(torch.ops.moegen.router_fwd_into.default._schema) == (
        "moegen::router_fwd_into(str module, Tensor logits, Tensor? expert_bias, "
        "Tensor(a3!) topk_indices, Tensor(a4!)? qb_histogram, Tensor? qb_bounds) "
        "-> (Tensor, Tensor, Tensor, Tensor, Tensor)")
    assert "!" not in str(torch.ops.moegen.router_bwd.default._schema)


@pytest.mark.parametrize("T", [0, 1, 1000])
def test_router_fake_shapes(sig_module, T):
    m = sig_module
    E, K = m.experts, m.topk
    _, logits, bias, _, _ = meta_inputs(m, T)
    for fmt, rshape, rdtype in [("bytemap", (T, E), torch.bool),
                                ("bitmap", (T, -(-E // 8)), torch.uint8)]:
        probs, routing, idx, w, inter, counts = torch.ops.moegen.router_fwd(m.key, logits, bias, fmt)
        assert (probs.shape, probs.dtype) == ((T, E), m.logits_dtype)
        assert (routing.shape, routing.dtype) == (rshape, rdtype)
        assert (idx.shape, idx.dtype, w.shape, w.dtype) == ((T, K), torch.int32, (T, K),
                                                            torch.float32)
        assert (inter.shape, counts.shape, counts.dtype) == ((T, E), (E,), torch.int32)
    buf = torch.empty(T, K, dtype=torch.int16, device="meta")
    outs = torch.ops.moegen.router_fwd_into(m.key, logits, bias, buf, None, None)
    assert [tuple(o.shape) for o in outs] == [(T, E), (T, K), (T, E), (E,), (0,)]
    gl = torch.ops.moegen.router_bwd(m.key, probs, w, inter, idx)
    assert (gl.shape, gl.dtype) == ((T, E), m.logits_dtype)
    with pytest.raises(ValueError, match="routing_map_format"):
        torch.ops.moegen.router_fwd(m.key, logits, bias, "indices")
    with pytest.raises(ValueError, match="topk_indices: shape"):
        torch.ops.moegen.router_fwd_into(m.key, logits, bias, buf[:, :1], None, None)


def test_router_qb_fake():
    m = moegen.Module(QB)
    logits = torch.empty(50, m.experts, dtype=m.logits_dtype, device="meta")
    bias = torch.empty(m.experts, device="meta")
    hist = torch.empty(m.experts, 32, dtype=torch.int32, device="meta")
    bounds = torch.empty(2, device="meta")
    buf = torch.empty(50, m.topk, dtype=torch.int32, device="meta")
    cutoff = torch.ops.moegen.router_fwd_into(m.key, logits, bias, buf, hist, bounds)[-1]
    assert cutoff.shape == (50,)
    with pytest.raises(ValueError, match="quantile_balancing"):
        torch.ops.moegen.router_fwd(m.key, logits, bias, "bytemap")
    with pytest.raises(ValueError, match="qb_histogram"):
        torch.ops.moegen.router_fwd_into(m.key, logits, bias, buf, None, None)


def test_router_symbolic_T(sig_module):
    m = sig_module

    def f(logits, bias):
        return torch.ops.moegen.router_fwd(m.key, logits, bias, "bitmap")

    _, logits, bias, _, _ = meta_inputs(m, 1000)
    g = make_fx(f, tracing_mode="symbolic")(logits, bias)
    out = [n for n in g.graph.nodes if n.op == "output"][0].args[0]
    shapes = [n.meta["val"].shape for n in out]
    T = shapes[0][0]
    assert isinstance(T, torch.SymInt)
    assert [tuple(s) for s in shapes[1:]][:3] == [(T, -(-m.experts // 8)), (T, m.topk),
                                                  (T, m.topk)]


def test_warm(tmp_path, monkeypatch):
    """Module.warm fills the JIT cache without a GPU (NVRTC only); a second
    warm compiles nothing."""
    monkeypatch.setenv("MOEGEN_CACHE_DIR", str(tmp_path))
    m = moegen.Module(SOFTMAX, arch="sm_90a")
    try:
        first = m.warm()
    except moegen.MoegenError as e:
        if "NO_NVRTC" in str(e):
            pytest.skip(f"no NVRTC here: {e}")
        raise
    assert first > 0 and m.warm() == 0


@pytest.mark.parametrize("align", [1, 16])
def test_permute_fake_shapes(sig_module, align):
    m = sig_module
    E, K, H = m.experts, m.topk, m.hidden
    for T in (0, 1, 777):
        x = torch.empty(T, H, dtype=torch.bfloat16, device="meta")
        idx = torch.empty(T, K, dtype=torch.int32, device="meta")
        probs = torch.empty(T, K, device="meta")
        rows, pp, row_map, offsets, counts = torch.ops.moegen.permute_fwd(m.key, x, idx, None,
                                                                          probs, None, align)
        R = T * K + E * (align - 1)
        assert [tuple(t.shape) for t in (rows, pp, row_map, offsets, counts)] == [
            (R, H), (R,), (T, K), (E + 1,), (E,)]
        assert rows.dtype == x.dtype and row_map.dtype == torch.int32
        out = torch.ops.moegen.unpermute_fwd(m.key, rows, row_map, offsets, counts, probs)
        assert (out.shape, out.dtype) == ((T, H), x.dtype)
        gx, gp = torch.ops.moegen.permute_bwd(m.key, rows, row_map, pp, None)
        assert (gx.shape, gp.shape) == ((T, H), (T, K))
        gr, gq = torch.ops.moegen.unpermute_bwd(m.key, out, rows, row_map, offsets, counts, probs)
        assert (gr.shape, gq.shape) == ((R, H), (T, K))
    bmap = torch.empty(5, E, dtype=torch.bool, device="meta")
    x = torch.empty(5, H, dtype=torch.float32, device="meta")
    rows, pp, *_ = torch.ops.moegen.permute_fwd(m.key, x, None, bmap, None, None, align)
    assert rows.dtype == torch.float32 and pp.shape == (0,)
    with pytest.raises(ValueError, match="exactly one"):
        torch.ops.moegen.permute_fwd(m.key, x, None, None, None, None, align)


def test_permute_compile_meta(sig_module):
    """permute -> unpermute compiled over the fakes: fullgraph, one graph for
    three T, gradients of x and probs through both backward ops."""
    from torch._dynamo.utils import counters

    m = sig_module

    def f(x, idx, probs):
        rows, _, row_map, offsets, counts = torch.ops.moegen.permute_fwd(m.key, x, idx, None,
                                                                         None, None, 16)
        return torch.ops.moegen.unpermute_fwd(m.key, rows, row_map, offsets, counts, probs)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    for T in (1024, 3000, 8192):
        x = torch.empty(T, m.hidden, dtype=torch.bfloat16, device="meta", requires_grad=True)
        probs = torch.empty(T, m.topk, device="meta", requires_grad=True)
        idx = torch.empty(T, m.topk, dtype=torch.int32, device="meta")
        for t in (x, probs, idx):
            torch._dynamo.mark_dynamic(t, 0)
        compiled(x, idx, probs).float().sum().backward()
        assert x.grad.shape == x.shape and probs.grad.shape == probs.shape
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


@pytest.mark.parametrize("which", [1, 2])
def test_gemm_fake_shapes(sig_module, which):
    m = sig_module
    E, H, F = m.experts, m.hidden, m.ffn
    N, K = (2 * F, H) if which == 1 else (H, F)
    for M in (0, 1, 999):
        x = torch.empty(M, K, dtype=torch.bfloat16, device="meta")
        w = torch.empty(E, N, K, dtype=torch.bfloat16, device="meta")
        counts = torch.empty(E, dtype=torch.int32, device="meta")
        y = torch.ops.moegen.gemm_fwd(m.key, which, x, w, counts, None)
        assert (y.shape, y.dtype) == ((M, N), torch.bfloat16)
        assert torch.ops.moegen.gemm_dgrad(m.key, which, y, w, counts, None).shape == (M, K)
        assert torch.ops.moegen.gemm_wgrad(m.key, which, y, x, counts, None).shape == (E, N, K)
    with pytest.raises(ValueError, match="x: shape"):
        torch.ops.moegen.gemm_fwd(m.key, 3 - which, x, w, counts, None)
    with pytest.raises(ValueError, match="exactly one of counts and offsets"):
        torch.ops.moegen.gemm_fwd(m.key, which, x, w, None, None)


def test_aux_fake_shapes(soft_module):
    m = soft_module
    for T in (0, 1, 500):
        logits = torch.empty(T, m.experts, dtype=m.logits_dtype, device="meta")
        scores, bmap, inter = torch.ops.moegen.aux_scores_fwd(m.key, logits, "bytemap")
        assert [tuple(t.shape) for t in (scores, bmap, inter)] == [(T, m.experts)] * 3
        assert (scores.dtype, bmap.dtype) == (torch.float32, torch.bool)
        bits = torch.ops.moegen.aux_scores_fwd(m.key, logits, "bitmap")[1]
        assert (bits.shape, bits.dtype) == ((T, -(-m.experts // 8)), torch.uint8)
        gl = torch.ops.moegen.aux_scores_bwd(m.key, scores, inter)
        assert (gl.shape, gl.dtype) == ((T, m.experts), m.logits_dtype)
        probs = torch.empty(T, m.experts, dtype=torch.bfloat16, device="meta")
        tpe = torch.empty(m.experts, dtype=torch.int64, device="meta")
        n = torch.empty((), dtype=torch.int64, device="meta")
        loss, const = torch.ops.moegen.aux_loss_fwd(m.key, probs, tpe, n, m.experts, m.topk, 1e-3)
        assert (loss.shape, loss.dtype, const.dtype) == ((), torch.bfloat16, torch.float32)
        gp = torch.ops.moegen.aux_loss_bwd(m.key, const, tpe, loss, T)
        assert (gp.shape, gp.dtype) == ((T, m.experts), torch.bfloat16)


def test_sort_chunks_fake(sig_module):
    m = sig_module
    x = torch.empty(40, m.hidden, dtype=torch.bfloat16, device="meta")
    s = torch.empty(5, dtype=torch.int32, device="meta")
    probs = torch.empty(40, device="meta")
    out, op, rm = torch.ops.moegen.sort_chunks(m.key, x, s, s, probs, False)
    assert (out.shape, op.shape, rm.shape, rm.dtype) == ((40, m.hidden), (40,), (40,), torch.int32)
    out, op, rm = torch.ops.moegen.sort_chunks(m.key, x, s, s, None, True)
    assert (op.shape, rm.shape) == ((0,), (0,))

"""GLM-5.3-Flash ("GLM-5-Next") text model in PyTorch, for training small models of the real architecture.

Mirrors ../../shared/docs/model-glm53.md and glint's fp32 reference (src/model/{mhc,kda,dsa,indexer,ffn,model}.cc);
section numbers (§) refer to the model doc. Parameters carry the HF checkpoint names (without the
`model.language_model.` prefix, which export.py adds), stored [out, in] like nn.Linear.

Shapes: B batch, T tokens, D hidden, hc mHC streams, H KDA heads × d head dim, M MLA heads, I indexer heads × e.
"""
import json
import math

import torch
import torch.nn.functional as F

PREFIX = "model.language_model."


class GlmConfig:
    """The text_config keys the text path reads (nested `text_config` or flat)."""

    def __init__(self, text):
        self.raw = text
        self.vocab_size = text["vocab_size"]
        self.hidden_size = text["hidden_size"]
        self.num_hidden_layers = text["num_hidden_layers"]
        self.layer_types = text["layer_types"]
        self.mlp_layer_types = text.get("mlp_layer_types") or (
            ["dense"] * text.get("first_k_dense_replace", 3) + ["sparse"] * self.num_hidden_layers)[
            :self.num_hidden_layers]
        lin = text["linear_attn_config"]
        self.kda_heads = lin["num_heads"]
        self.kda_head_dim = lin["head_dim"]
        self.kda_conv = lin["short_conv_kernel_size"]
        self.kda_lower_bound = lin["gate_lower_bound"]
        self.heads = text["num_attention_heads"]
        self.q_lora_rank = text["q_lora_rank"]
        self.kv_lora_rank = text["kv_lora_rank"]
        self.qk_head_dim = text["qk_nope_head_dim"]
        assert text.get("qk_rope_head_dim", 0) == 0, "NoPE only"
        self.v_head_dim = text["v_head_dim"]
        self.index_heads = text["index_n_heads"]
        self.index_head_dim = text["index_head_dim"]
        self.index_topk = text["index_topk"]
        self.index_kpool = text["index_kpool"]
        self.intermediate_size = text["intermediate_size"]
        self.moe_intermediate_size = text["moe_intermediate_size"]
        self.n_experts = text["n_routed_experts"]
        self.top_k = text["num_experts_per_tok"]
        self.n_shared = text["n_shared_experts"]
        self.norm_topk_prob = text.get("norm_topk_prob", True)
        self.routed_scaling_factor = text["routed_scaling_factor"]
        self.swiglu_limit = text["swiglu_limit"]
        self.hc = text["hc_mult"]
        self.sinkhorn_iters = text["hc_sinkhorn_iters"]
        self.hc_eps = text["hc_eps"]
        self.rms_eps = text["rms_norm_eps"]
        self.mtp_layers = text.get("num_nextn_predict_layers", 0)

    @staticmethod
    def load(path):
        with open(path) as f:
            raw = json.load(f)
        return GlmConfig(raw.get("text_config", raw))

    def is_kda(self, layer):
        return self.layer_types[layer] == "linear_attention"

    def is_dense_mlp(self, layer):
        return self.mlp_layer_types[layer] == "dense"

    @property
    def topk_pools(self):
        return self.index_topk // self.index_kpool


# ---------------------------------------------------------------------------------------------------------------
# Parameter table: every tensor of the checkpoint with its shape and storage (the C++ ExpectedTensors list).
# ---------------------------------------------------------------------------------------------------------------

def expected_tensors(c):
    """[(name without PREFIX for layer tensors / full name for lm_head, shape, storage)] in checkpoint order.
    storage ∈ {"fp8", "bf16", "f32"} as src/io/checkpoint_schema.cc."""
    specs = []
    add = lambda name, shape, storage: specs.append((name, tuple(shape), storage))
    D = c.hidden_size
    mix = (2 + c.hc) * c.hc

    def dsa(p):
        p += "self_attn."
        M = c.heads
        add(p + "q_a_proj.weight", (c.q_lora_rank, D), "fp8")
        add(p + "q_a_layernorm.weight", (c.q_lora_rank,), "bf16")
        add(p + "q_b_proj.weight", (M * c.qk_head_dim, c.q_lora_rank), "fp8")
        add(p + "kv_a_proj_with_mqa.weight", (c.kv_lora_rank, D), "fp8")
        add(p + "kv_a_layernorm.weight", (c.kv_lora_rank,), "bf16")
        add(p + "kv_b_proj.weight", (M * (c.qk_head_dim + c.v_head_dim), c.kv_lora_rank), "bf16")
        add(p + "o_proj.weight", (D, M * c.v_head_dim), "fp8")
        ip = p + "indexer."
        e = c.index_head_dim
        add(ip + "wq_b.weight", (c.index_heads * e, c.q_lora_rank), "bf16")
        add(ip + "wk.weight", (e, D), "bf16")
        add(ip + "k_norm.weight", (e,), "bf16")
        add(ip + "k_norm.bias", (e,), "bf16")
        add(ip + "weights_proj.weight", (c.index_heads, D), "bf16")
        add(ip + "index_kpool_compress_gate", (e, D), "bf16")
        add(ip + "index_kpool_compress_ape", (c.index_kpool, e), "bf16")

    def kda(p):
        p += "self_attn."
        W = c.kda_heads * c.kda_head_dim
        r = c.kda_head_dim
        for n in ("q_proj", "k_proj", "v_proj"):
            add(p + n + ".weight", (W, D), "bf16")
        add(p + "o_proj.weight", (D, W), "bf16")
        add(p + "f_a_proj.weight", (r, D), "bf16")
        add(p + "f_b_proj.weight", (W, r), "bf16")
        add(p + "g_a_proj.weight", (r, D), "bf16")
        add(p + "g_b_proj.weight", (W, r), "bf16")
        add(p + "b_proj.weight", (c.kda_heads, D), "bf16")
        for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
            add(p + n + ".weight", (W, 1, c.kda_conv), "f32")
        add(p + "A_log", (c.kda_heads,), "f32")
        add(p + "dt_bias", (W,), "f32")
        add(p + "o_norm.weight", (c.kda_head_dim,), "bf16")

    def swiglu(p, width):
        add(p + "gate_proj.weight", (width, D), "fp8")
        add(p + "up_proj.weight", (width, D), "fp8")
        add(p + "down_proj.weight", (D, width), "fp8")

    def moe(p):
        p += "mlp."
        add(p + "gate.weight", (c.n_experts, D), "bf16")
        add(p + "gate.e_score_correction_bias", (c.n_experts,), "f32")
        if c.n_shared > 0:
            swiglu(p + "shared_experts.", c.moe_intermediate_size * c.n_shared)
        for e in range(c.n_experts):
            swiglu(p + f"experts.{e}.", c.moe_intermediate_size)

    add("embed_tokens.weight", (c.vocab_size, D), "bf16")
    for layer in range(c.num_hidden_layers):
        p = f"layers.{layer}."
        add(p + "input_layernorm.weight", (D,), "bf16")
        add(p + "post_attention_layernorm.weight", (D,), "bf16")
        for site in ("hc_attn_", "hc_ffn_"):
            add(p + site + "fn", (mix, c.hc * D), "f32")
            add(p + site + "base", (mix,), "f32")
            add(p + site + "scale", (3,), "f32")
        kda(p) if c.is_kda(layer) else dsa(p)
        swiglu(p + "mlp.", c.intermediate_size) if c.is_dense_mlp(layer) else moe(p)
    if c.mtp_layers:
        p = f"layers.{c.num_hidden_layers}."
        add(p + "eh_proj.weight", (D, 2 * D), "bf16")
        for n in ("enorm.weight", "hnorm.weight", "shared_head.norm.weight", "input_layernorm.weight",
                  "post_attention_layernorm.weight"):
            add(p + n, (D,), "bf16")
        dsa(p)
        moe(p)
    add("norm.weight", (D,), "bf16")
    add("lm_head.weight", (c.vocab_size, D), "bf16")
    return specs


def checkpoint_name(name):
    return name if name == "lm_head.weight" else PREFIX + name


# ---------------------------------------------------------------------------------------------------------------
# Building blocks (functional; `p` is a name → tensor lookup)
# ---------------------------------------------------------------------------------------------------------------

def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def layer_norm(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def linear(x, weight):
    return x @ weight.t()


def mhc_coefficients(c, X, fn, base, scale):
    """§4.1. X: [B, T, hc, D] → pre [B,T,hc], post [B,T,hc], comb [B,T,hc(source j),hc(destination k)]."""
    hc = c.hc
    xf = X.flatten(-2)                                                   # [B, T, hc·D], stream-major
    inverse_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + c.rms_eps)  # flat norm eps = rms_norm_eps
    mix = linear(xf, fn) * inverse_rms                                   # [B, T, (2+hc)·hc]
    pre = torch.sigmoid(mix[..., :hc] * scale[0] + base[:hc]) + c.hc_eps
    post = 2.0 * torch.sigmoid(mix[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
    logits = (mix[..., 2 * hc:] * scale[2] + base[2 * hc:]).unflatten(-1, (hc, hc))
    comb = torch.softmax(logits, dim=-1) + c.hc_eps                      # softmax over destinations k
    comb = comb / (comb.sum(-2, keepdim=True) + c.hc_eps)                # column normalisation
    for _ in range(c.sinkhorn_iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + c.hc_eps)            # rows
        comb = comb / (comb.sum(-2, keepdim=True) + c.hc_eps)            # columns
    return pre, post, comb


def mhc_read(pre, X):
    return (pre.unsqueeze(-1) * X).sum(-2)                               # [B, T, D]


def mhc_write(post, comb, y, R):
    """X'[k] = post[k]·y + Σ_j comb[j,k]·R[j]   (§4.3)"""
    out = post.unsqueeze(-1) * y.unsqueeze(-2)                           # [B,T,hc,D]
    for j in range(R.shape[-2]):  # hc broadcast multiply-adds: a batched 4×4 matmul per token is far slower on CPU
        out = out + comb[..., j, :].unsqueeze(-1) * R[..., j:j + 1, :]
    return out


def swiglu(x, gate, up, down, limit):
    """Clamped SwiGLU (§8.1): gate clamped above only, up on both sides."""
    g = linear(x, gate).clamp(max=limit)
    u = linear(x, up).clamp(-limit, limit)
    return linear(F.silu(g) * u, down)


# ---- KDA (§5) ----

def short_conv_silu(x, weight):
    """Causal depthwise conv, tap K−1 on the current token, zero history; then SiLU. x: [B,T,W], weight [W,1,K]."""
    K = weight.shape[-1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), weight, groups=weight.shape[0])
    return F.silu(y.transpose(1, 2))


def l2_normalize(x, scale=1.0):
    return x * (scale * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6))  # eps inside the sqrt (pitfall 2)


def delta_rule_recurrent(q, k, v, g, beta):
    """Token-by-token delta rule. q,k,v,g: [B,H,T,d]; beta [B,H,T] → o [B,H,T,d]. The oracle for the chunked form."""
    B, H, T, d = q.shape
    S = q.new_zeros(B, H, d, d)                                          # [key, value]
    outs = []
    for t in range(T):
        S = S * torch.exp(g[:, :, t]).unsqueeze(-1)
        u = torch.einsum("bhkv,bhk->bhv", S, k[:, :, t])
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], beta[:, :, t, None] * (v[:, :, t] - u))
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    return torch.stack(outs, dim=2)


def delta_rule_chunked(q, k, v, g, beta, chunk=16):
    """WY/chunked form of the same recurrence (§5.2, docs/model-kda.md (6a)–(6e)).

    Per chunk of n tokens with in-chunk cumulative log-decay G_i: the pairwise decays exp(G_i − G_j) are formed as
    (x_i·exp(G_i))·(y_j·exp(−G_j)), which stays finite in fp32 while |G| < 88, i.e. chunk · |gate_lower_bound| < 88:
    16 tokens × 5 = 80. Use chunk 64 only in float64. (I + L) is unit lower triangular; its solve gives U and W."""
    B, H, T, d = q.shape
    pad = (-T) % chunk
    if pad:  # zero tokens after the real ones are no-ops (k = v = 0, β = 0, g = 0)
        q, k, v, g = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v, g))
        beta = F.pad(beta, (0, pad))
    N = (T + pad) // chunk
    q, k, v, g = (x.reshape(B, H, N, chunk, d) for x in (q, k, v, g))
    beta = beta.reshape(B, H, N, chunk, 1)
    G = g.cumsum(-2)                                                      # [B,H,N,n,d]
    decay = torch.exp(G)
    k_up, k_down = k * decay, k * torch.exp(-G)
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(-1)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(0)
    L = (beta * (k_up @ k_down.transpose(-1, -2))).masked_fill(~strict, 0.0)          # [.., n, n]
    A_qk = ((q * decay) @ k_down.transpose(-1, -2)).masked_fill(~causal, 0.0)          # [.., n, n]
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    rhs = torch.cat([beta * v, beta * k_up], dim=-1)                                    # [.., n, 2d]
    solved = torch.linalg.solve_triangular(eye + L, rhs, upper=False, unitriangular=True)
    U, W = solved[..., :d], solved[..., d:]
    S = q.new_zeros(B, H, d, d)
    outs = []
    for n in range(N):
        nu = U[:, :, n] - W[:, :, n] @ S                                  # new values [B,H,n,d]
        outs.append((q[:, :, n] * decay[:, :, n]) @ S + A_qk[:, :, n] @ nu)
        G_last = G[:, :, n, -1:, :]                                       # [B,H,1,d]
        S = S * torch.exp(G_last).transpose(-1, -2) + (k[:, :, n] * torch.exp(G_last - G[:, :, n])).transpose(-1, -2) @ nu
    o = torch.stack(outs, dim=2).reshape(B, H, N * chunk, d)
    return o[:, :, :T]


def kda_forward(c, p, pre, h, chunk=16, recurrent=False):
    """h: [B,T,D] normed hidden → [B,T,D]."""
    B, T, _ = h.shape
    H, d = c.kda_heads, c.kda_head_dim
    a = pre + "self_attn."
    q = short_conv_silu(linear(h, p(a + "q_proj.weight")), p(a + "q_conv1d.weight"))
    k = short_conv_silu(linear(h, p(a + "k_proj.weight")), p(a + "k_conv1d.weight"))
    v = short_conv_silu(linear(h, p(a + "v_proj.weight")), p(a + "v_conv1d.weight"))
    heads = lambda x: x.view(B, T, H, d).transpose(1, 2)                 # [B,H,T,d]
    q = l2_normalize(heads(q), d ** -0.5)
    k = l2_normalize(heads(k))
    v = heads(v)
    f = linear(linear(h, p(a + "f_a_proj.weight")), p(a + "f_b_proj.weight"))
    rate = torch.exp(p(a + "A_log")).repeat_interleave(d)                # [H·d]
    g = c.kda_lower_bound * torch.sigmoid(rate * (f + p(a + "dt_bias")))  # (lb, 0): per key channel (pitfall 1, 4)
    g = heads(g)
    beta = torch.sigmoid(linear(h, p(a + "b_proj.weight"))).transpose(1, 2)  # [B,H,T]
    if recurrent:
        o = delta_rule_recurrent(q, k, v, g, beta)
    else:
        o = delta_rule_chunked(q, k, v, g, beta, chunk)
    o = o.transpose(1, 2)                                                # [B,T,H,d]
    z = linear(linear(h, p(a + "g_a_proj.weight")), p(a + "g_b_proj.weight")).view(B, T, H, d)
    o = rms_norm(o, p(a + "o_norm.weight"), c.rms_eps) * torch.sigmoid(z)  # sigmoid-gated RMSNorm (pitfall 3)
    return linear(o.reshape(B, T, H * d), p(a + "o_proj.weight"))


# ---- DSA: NoPE MLA (§6) + KPool indexer (§7) ----

def indexer_scores(c, p, a, h, q_resid):
    """Index scores s[b, t, m] = Σ_h w_h relu(iq_h·pk_m / √e) over complete pools m (§7.1–7.3), and the pool
    visibility mask (4m+3 ≤ t). h, q_resid: [B,T,·] → scores [B,T,P], visible [T,P]."""
    B, T, _ = h.shape
    I, e, kp = c.index_heads, c.index_head_dim, c.index_kpool
    ip = a + "indexer."
    iq = linear(q_resid, p(ip + "wq_b.weight")).view(B, T, I, e)
    ik = layer_norm(linear(h, p(ip + "wk.weight")), p(ip + "k_norm.weight"), p(ip + "k_norm.bias"), 1e-6)
    ig = linear(h, p(ip + "index_kpool_compress_gate"))
    w = linear(h, p(ip + "weights_proj.weight")) * I ** -0.5             # [B,T,I]
    P = T // kp
    gates = ig[:, :P * kp].view(B, P, kp, e) + p(ip + "index_kpool_compress_ape")
    pooled = (torch.softmax(gates, dim=2) * ik[:, :P * kp].view(B, P, kp, e)).sum(2)  # [B,P,e]
    logits = torch.einsum("btie,bpe->btip", iq, pooled) * e ** -0.5
    scores = torch.einsum("bti,btip->btp", w, torch.relu(logits))
    t = torch.arange(T, device=h.device)
    m = torch.arange(P, device=h.device)
    visible = (m[None, :] * kp + kp - 1) <= t[:, None]                  # [T,P]
    return scores, visible


def select_keys(c, scores, visible, T):
    """Attention mask [B,T,T] of the indexer's key set: top-K visible pools (ties → lower pool) + the tail."""
    B = scores.shape[0]
    kp, K = c.index_kpool, c.topk_pools
    P = scores.shape[-1]
    t = torch.arange(T, device=scores.device)
    j = torch.arange(T, device=scores.device)
    causal = j[None, :] <= t[:, None]
    n_pool = (t + 1) // kp                                               # visible pools per query
    tail = (j[None, :] >= (n_pool * kp)[:, None]) & causal               # [T,T]
    if P <= K:                                                           # dense regime for every query
        return causal.expand(B, T, T)
    masked = scores.masked_fill(~visible, -math.inf)
    order = torch.sort(masked, dim=-1, descending=True, stable=True).indices[..., :K]  # [B,T,K]
    chosen = torch.zeros(B, T, P, dtype=torch.bool, device=scores.device)
    chosen.scatter_(-1, order, True)
    chosen &= visible                                                    # picks among masked pools are dropped
    chosen |= (n_pool[:, None] <= K) & visible                           # dense regime per query
    pool_of_key = torch.div(j, kp, rounding_mode="floor").clamp(max=P - 1)
    in_pool = torch.gather(chosen, 2, pool_of_key.expand(B, T, T)) & (j < P * kp)[None, None, :]
    return (in_pool & causal) | tail


def dsa_forward(c, p, pre, h, sparse=True, want_indexer_loss=False):
    """h: [B,T,D] → (out [B,T,D], indexer KL loss or None). With want_indexer_loss the indexer (on detached
    inputs) is distilled toward the dense attention's distribution over pools (DSA's warm-up objective)."""
    B, T, D = h.shape
    M, qk, vd = c.heads, c.qk_head_dim, c.v_head_dim
    a = pre + "self_attn."
    q_resid = rms_norm(linear(h, p(a + "q_a_proj.weight")), p(a + "q_a_layernorm.weight"), c.rms_eps)
    q = linear(q_resid, p(a + "q_b_proj.weight")).view(B, T, M, qk).transpose(1, 2)       # [B,M,T,qk]
    latent = rms_norm(linear(h, p(a + "kv_a_proj_with_mqa.weight")), p(a + "kv_a_layernorm.weight"), c.rms_eps)
    kv = linear(latent, p(a + "kv_b_proj.weight")).view(B, T, M, qk + vd).transpose(1, 2)  # per-head [k | v]
    k, v = kv[..., :qk], kv[..., qk:]
    logits = (q @ k.transpose(-1, -2)) * qk ** -0.5                                       # [B,M,T,T]
    causal = torch.ones(T, T, dtype=torch.bool, device=h.device).tril()
    need_scores = (sparse and T // c.index_kpool > c.topk_pools) or want_indexer_loss
    scores = visible = None
    if need_scores:
        scores, visible = indexer_scores(c, p, a, h.detach() if want_indexer_loss else h,
                                         q_resid.detach() if want_indexer_loss else q_resid)
    mask = causal
    if sparse and T // c.index_kpool > c.topk_pools:
        mask = select_keys(c, scores.detach(), visible, T).unsqueeze(1)                  # [B,1,T,T]
    probs = torch.softmax(logits.masked_fill(~mask, -math.inf), dim=-1)
    o = (probs @ v).transpose(1, 2).reshape(B, T, M * vd)
    out = linear(o, p(a + "o_proj.weight"))
    loss = None
    if want_indexer_loss and scores.shape[-1] > 1:
        loss = indexer_distillation_loss(c, logits.detach(), causal, scores, visible)
    return out, loss


def indexer_distillation_loss(c, attn_logits, causal, scores, visible):
    """KL(target ‖ softmax(index scores)) over visible pools, target = dense attention probability mass of each
    pool, averaged over heads and renormalised over the visible pools (DeepSeek-V3.2's indexer warm-up loss,
    at pool granularity). Queries with fewer than two visible pools carry no signal and are skipped."""
    B, M, T, _ = attn_logits.shape
    kp = c.index_kpool
    P = scores.shape[-1]
    dense = torch.softmax(attn_logits.masked_fill(~causal, -math.inf), dim=-1).mean(1)   # [B,T,T]
    pool_mass = dense[..., :P * kp].reshape(B, T, P, kp).sum(-1) * visible               # [B,T,P]
    target = pool_mass / pool_mass.sum(-1, keepdim=True).clamp_min(1e-12)
    log_q = torch.log_softmax(scores.masked_fill(~visible, -1e30), dim=-1)
    kl = (target * (torch.log(target.clamp_min(1e-12)) - log_q)).masked_fill(~visible, 0.0).sum(-1)  # [B,T]
    rows = visible.sum(-1) >= 2                                                          # [T]
    return kl[:, rows].mean()


# ---- MoE (§8) ----

def route(c, x, router, bias):
    """Sigmoid router (§8.2). x: [N,D] → experts [N,k] (by choice score), weights [N,k], scores [N,E]."""
    scores = torch.sigmoid(linear(x, router))
    choice = (scores + bias).detach()
    experts = torch.sort(choice, dim=-1, descending=True, stable=True).indices[:, :c.top_k]  # ties → lower id
    chosen = scores.gather(1, experts)
    weights = chosen / (chosen.sum(-1, keepdim=True) + 1e-20) if c.norm_topk_prob else chosen
    return experts, weights * c.routed_scaling_factor


def moe_forward(c, p, pre, x, loads=None):
    """x: [B,T,D]. `loads` (optional dict) receives the token count per expert for the bias balancer."""
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    m = pre + "mlp."
    experts, weights = route(c, x, p(m + "gate.weight"), p(m + "gate.e_score_correction_bias"))
    out = torch.zeros_like(x)                                            # [N,D]
    counts = torch.bincount(experts.flatten(), minlength=c.n_experts)
    if loads is not None:
        loads[pre] = counts
    for e in range(c.n_experts):
        if counts[e] == 0:
            continue
        token, slot = torch.nonzero(experts == e, as_tuple=True)
        ep = m + f"experts.{e}."
        y = swiglu(x[token], p(ep + "gate_proj.weight"), p(ep + "up_proj.weight"), p(ep + "down_proj.weight"),
                   c.swiglu_limit)
        out.index_add_(0, token, y * weights[token, slot].unsqueeze(-1))
    if c.n_shared > 0:
        sp = m + "shared_experts."
        out = out + swiglu(x, p(sp + "gate_proj.weight"), p(sp + "up_proj.weight"), p(sp + "down_proj.weight"),
                           c.swiglu_limit)
    return out.reshape(shape)


# ---------------------------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------------------------

class GlmModel(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c = config
        self.specs = expected_tensors(config)
        self.names = [name for name, _, _ in self.specs]
        self.storage = {name: storage for name, _, storage in self.specs}
        self.params = torch.nn.ParameterList()
        self.index = {}
        self.buffers_ = {}
        for name, shape, _ in self.specs:
            if name.endswith("e_score_correction_bias"):  # updated by the load balancer, not by gradients
                self.buffers_[name] = torch.zeros(shape)
                continue
            self.index[name] = len(self.params)
            self.params.append(torch.nn.Parameter(torch.zeros(shape)))

    def p(self, name):
        i = self.index.get(name)
        return self.params[i] if i is not None else self.buffers_[name]

    def named_tensors(self):
        return [(name, self.p(name)) for name in self.names]

    def set_dtype(self, dtype):
        self.to(dtype)
        for name in self.buffers_:
            self.buffers_[name] = self.buffers_[name].to(dtype)

    def load_tensors(self, tensors):
        """tensors: {checkpoint name: tensor}; must be exactly the expected set."""
        expected = {checkpoint_name(n) for n in self.names}
        got = set(tensors)
        if got != expected:
            raise ValueError(f"checkpoint tensors differ: missing {sorted(expected - got)[:5]}, "
                             f"unexpected {sorted(got - expected)[:5]}")
        with torch.no_grad():
            for name in self.names:
                value = tensors[checkpoint_name(name)]
                target = self.p(name)
                target.copy_(value.to(target.dtype).reshape(target.shape))

    # ---- forward ----
    def trunk(self, tokens, sparse=True, chunk=16, recurrent=False, indexer_loss=False, loads=None, trace=None):
        """tokens [B,T] → final normed hidden [B,T,D] and the summed indexer losses (or 0)."""
        c, p = self.c, self.p
        emb = p("embed_tokens.weight")[tokens]                                   # [B,T,D]
        X = emb.unsqueeze(-2).expand(*emb.shape[:-1], c.hc, c.hidden_size)      # 4 identical streams
        aux = emb.new_zeros(())
        for layer in range(c.num_hidden_layers):
            pre = f"layers.{layer}."
            coef = mhc_coefficients(c, X, p(pre + "hc_attn_fn"), p(pre + "hc_attn_base"), p(pre + "hc_attn_scale"))
            h = rms_norm(mhc_read(coef[0], X), p(pre + "input_layernorm.weight"), c.rms_eps)
            if c.is_kda(layer):
                y = kda_forward(c, p, pre, h, chunk=chunk, recurrent=recurrent)
            else:
                y, loss = dsa_forward(c, p, pre, h, sparse=sparse, want_indexer_loss=indexer_loss)
                if loss is not None:
                    aux = aux + loss
            if trace is not None:
                trace[f"layer.{layer}.attn_in"], trace[f"layer.{layer}.attn_out"] = h, y
            X = mhc_write(coef[1], coef[2], y, X)
            coef = mhc_coefficients(c, X, p(pre + "hc_ffn_fn"), p(pre + "hc_ffn_base"), p(pre + "hc_ffn_scale"))
            h = rms_norm(mhc_read(coef[0], X), p(pre + "post_attention_layernorm.weight"), c.rms_eps)
            if c.is_dense_mlp(layer):
                m = pre + "mlp."
                y = swiglu(h, p(m + "gate_proj.weight"), p(m + "up_proj.weight"), p(m + "down_proj.weight"),
                           c.swiglu_limit)
            else:
                y = moe_forward(c, p, pre, h, loads)
            if trace is not None:
                trace[f"layer.{layer}.ffn_in"], trace[f"layer.{layer}.ffn_out"] = h, y
            X = mhc_write(coef[1], coef[2], y, X)
            if trace is not None:
                trace[f"layer.{layer}.streams"] = X
        normed = rms_norm(X.mean(-2), p("norm.weight"), c.rms_eps)               # plain mean of the streams
        return normed, aux

    def logits(self, normed):
        return linear(normed, self.p("lm_head.weight"))

    def mtp(self, normed, next_tokens, sparse=True, indexer_loss=False, loads=None):
        """Draft logits for x_{t+2} from h_t (= trunk normed hidden at t) and x_{t+1} (§10).
        normed [B,T',D], next_tokens [B,T'] (the pairs form a sequence of their own)."""
        c, p = self.c, self.p
        pre = f"layers.{c.num_hidden_layers}."
        e = rms_norm(p("embed_tokens.weight")[next_tokens], p(pre + "enorm.weight"), c.rms_eps)
        hh = rms_norm(normed, p(pre + "hnorm.weight"), c.rms_eps)
        z = linear(torch.cat([e, hh], dim=-1), p(pre + "eh_proj.weight"))       # embedding half first
        y, loss = dsa_forward(c, p, pre, rms_norm(z, p(pre + "input_layernorm.weight"), c.rms_eps), sparse=sparse,
                              want_indexer_loss=indexer_loss)
        r = z + y
        r = r + moe_forward(c, p, pre, rms_norm(r, p(pre + "post_attention_layernorm.weight"), c.rms_eps), loads)
        out = self.logits(rms_norm(r, p(pre + "shared_head.norm.weight"), c.rms_eps))
        return out, (loss if loss is not None else z.new_zeros(()))

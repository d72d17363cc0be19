"""A DeepSeek-V3-style MLA decoder in Flax NNX (HELIX_SEMANTICS.md §1.2).

Every layer: RMSNorm -> MLA attention (q and kv low-rank projections, decoupled RoPE at *global*
positions) -> residual -> RMSNorm -> SwiGLU MLP -> residual; then a final RMSNorm and an untied LM head.

Two attention paths share all non-attention code through :meth:`MLADecoder.forward_with`:
  * :meth:`MLAAttention.__call__` — plain (non-absorbed) causal attention, used for prefill and as
    the greedy oracle: ``k_nope = c_latent W_UK^T``, ``v = c_latent W_UV^T`` per head.
  * the absorbed decode pieces used by Helix verify: :meth:`MLAAttention.absorb_query` folds
    ``W_UK`` into the query (``q_latent [B, G, H, 512]``), and :meth:`MLAAttention.project_out`
    applies ``W_UV`` to one rank's head group after the combine and multiplies by that group's
    rows of ``o_proj`` (row-parallel; the caller sums over ranks).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from .config import MLAModelConfig

__all__ = ["RMSNorm", "MLAAttention", "MLP", "DecoderLayer", "MLADecoder", "apply_rope",
           "derive_drafter", "init_model"]

_HI = jax.lax.Precision.HIGHEST  # exact f32 on every platform: greedy equality must not hinge on TF32


def _mm(eq, *xs):
    return jnp.einsum(eq, *xs, precision=_HI)


def _normal(rngs, shape, std):
    return nnx.Param(std * jax.random.normal(rngs.params(), shape, jnp.float32))


def apply_rope(x, positions, *, theta: float):
    """Rotate-half RoPE of ``x [..., T, (H,) Dr]`` at integer global ``positions [..., T]``.

    ``x`` may carry a head axis before the last one (``[B, T, H, Dr]``); positions broadcast.
    """
    dr = x.shape[-1]
    inv = theta ** (-jnp.arange(0, dr, 2, dtype=jnp.float32) / dr)            # [Dr/2]
    ang = jnp.asarray(positions, jnp.float32)[..., None] * inv                  # [B, T, Dr/2]
    if x.ndim == ang.ndim + 1:                                                  # head axis
        ang = ang[..., None, :]
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    x1, x2 = x[..., : dr // 2], x[..., dr // 2:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, *, eps: float):
        self.weight = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.eps = eps

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (y * self.weight[...]).astype(x.dtype)


class MLAAttention(nnx.Module):
    """Multi-head latent attention. Weights: ``w_uk [H, dn, 512]``, ``w_uv [H, dv, 512]`` (the two
    halves of ``kv_b_proj``), ``o_proj [H*dv, hidden]``."""

    def __init__(self, cfg: MLAModelConfig, *, rngs: nnx.Rngs, out_scale: float = 1.0):
        d, h = cfg.hidden_size, cfg.num_heads
        dn, dr, dv, dl = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
        self.cfg = cfg
        self.q_a_proj = _normal(rngs, (d, cfg.q_lora_rank), d ** -0.5)
        self.q_a_norm = RMSNorm(cfg.q_lora_rank, eps=cfg.rms_eps)
        self.q_b_proj = _normal(rngs, (cfg.q_lora_rank, h * (dn + dr)), cfg.q_lora_rank ** -0.5)
        self.kv_a_proj = _normal(rngs, (d, dl + dr), d ** -0.5)
        self.kv_a_norm = RMSNorm(dl, eps=cfg.rms_eps)
        self.w_uk = _normal(rngs, (h, dn, dl), dl ** -0.5)
        self.w_uv = _normal(rngs, (h, dv, dl), dl ** -0.5)
        self.o_proj = _normal(rngs, (h * dv, d), out_scale * (h * dv) ** -0.5)

    def queries(self, x, positions):
        """``x [B, T, hidden]`` -> ``q_nope [B, T, H, dn]``, ``q_rope [B, T, H, 64]`` (RoPE'd)."""
        c = self.cfg
        q = _mm("btd,dq->btq", self.q_a_norm(_mm("btd,dq->btq", x, self.q_a_proj[...])), self.q_b_proj[...])
        q = q.reshape(*q.shape[:2], c.num_heads, c.qk_nope_head_dim + c.qk_rope_head_dim)
        q_nope, q_pe = q[..., : c.qk_nope_head_dim], q[..., c.qk_nope_head_dim:]
        return q_nope, apply_rope(q_pe, positions, theta=c.rope_theta)

    def latents(self, x, positions):
        """``x [B, T, hidden]`` -> cache rows ``c_latent [B, T, 512]``, ``k_rope [B, T, 64]`` (RoPE'd
        at the tokens' global positions, as stored in the cache)."""
        c = self.cfg
        kv = _mm("btd,dk->btk", x, self.kv_a_proj[...])
        c_lat = self.kv_a_norm(kv[..., : c.kv_lora_rank])
        return c_lat, apply_rope(kv[..., c.kv_lora_rank:], positions, theta=c.rope_theta)

    def absorb_query(self, q_nope):
        """Fold ``W_UK`` into the query: ``[B, T, H, dn]`` -> ``q_latent [B, T, H, 512]``."""
        return _mm("bthn,hnl->bthl", q_nope, self.w_uk[...])

    def project_out(self, o_latent, *, head_start=0):
        """``W_UV`` then ``o_proj`` rows of a head group: ``o_latent [B, T, Hg, 512]`` -> ``[B, T, hidden]``.

        ``head_start`` (may be traced, e.g. ``rank * Hc``) selects heads ``[head_start, head_start+Hg)``;
        with ``Hg < H`` the result is this group's partial sum of the row-parallel ``o_proj``.
        """
        hg = o_latent.shape[2]
        dv = self.cfg.v_head_dim
        w_uv = jax.lax.dynamic_slice_in_dim(self.w_uv[...], head_start, hg, axis=0)
        w_o = jax.lax.dynamic_slice_in_dim(self.o_proj[...], head_start * dv, hg * dv, axis=0)
        v = _mm("bthl,hvl->bthv", o_latent.astype(jnp.float32), w_uv)
        return _mm("btk,kd->btd", v.reshape(*v.shape[:2], hg * dv), w_o)

    def __call__(self, x, positions):
        """Plain causal attention (non-absorbed). ``x [B, T, hidden]``, ``positions [B, T]``.

        Token t attends to every token s of the same row with ``positions[s] <= positions[t]``.
        Returns ``(out [B, T, hidden], (c_latent [B, T, 512], k_rope [B, T, 64]))``.
        """
        c = self.cfg
        q_nope, q_pe = self.queries(x, positions)
        c_lat, k_pe = self.latents(x, positions)
        k_nope = _mm("bsl,hnl->bshn", c_lat, self.w_uk[...])
        v = _mm("bsl,hvl->bshv", c_lat, self.w_uv[...])
        logits = (_mm("bthn,bshn->bhts", q_nope, k_nope) + _mm("bthr,bsr->bhts", q_pe, k_pe)) * c.softmax_scale
        causal = positions[:, None, None, :] <= positions[:, None, :, None]     # [B, 1, T, S]
        w = jax.nn.softmax(jnp.where(causal, logits, -jnp.inf), axis=-1)
        o = _mm("bhts,bshv->bthv", w, v)
        out = _mm("btk,kd->btd", o.reshape(*o.shape[:2], -1), self.o_proj[...])
        return out, (c_lat, k_pe)


class MLP(nnx.Module):
    def __init__(self, cfg: MLAModelConfig, *, rngs: nnx.Rngs, out_scale: float = 1.0):
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.gate = _normal(rngs, (d, f), d ** -0.5)
        self.up = _normal(rngs, (d, f), d ** -0.5)
        self.down = _normal(rngs, (f, d), out_scale * f ** -0.5)

    def __call__(self, x):
        g = _mm("btd,df->btf", x, self.gate[...])
        u = _mm("btd,df->btf", x, self.up[...])
        return _mm("btf,fd->btd", jax.nn.silu(g) * u, self.down[...])


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: MLAModelConfig, *, rngs: nnx.Rngs, index: int = 0):
        scale = cfg.residual_scale * cfg.residual_decay ** index
        self.attn_norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_eps)
        self.attn = MLAAttention(cfg, rngs=rngs, out_scale=scale)
        self.mlp_norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_eps)
        self.mlp = MLP(cfg, rngs=rngs, out_scale=scale)


class MLADecoder(nnx.Module):
    """Token embedding, ``num_layers`` MLA decoder layers, final RMSNorm, untied LM head."""

    def __init__(self, cfg: MLAModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed = _normal(rngs, (cfg.vocab_size, cfg.hidden_size), 1.0)
        self.layers = nnx.List([DecoderLayer(cfg, rngs=rngs, index=i) for i in range(cfg.num_layers)])
        self.final_norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_eps)
        self.lm_head = _normal(rngs, (cfg.hidden_size, cfg.vocab_size),
                               cfg.logit_scale * cfg.hidden_size ** -0.5)

    def forward_with(self, tokens, positions, attend):
        """Run the decoder with a pluggable attention.

        ``tokens [B, T]`` int, ``positions [B, T]`` global positions;
        ``attend(i, attn: MLAAttention, h [B, T, hidden], positions) -> (out [B, T, hidden], aux)``.
        Returns ``(logits [B, T, V] float32, [aux_0, ..., aux_{L-1}])``.
        """
        x = jnp.take(self.embed[...], tokens, axis=0)
        aux = []
        for i, layer in enumerate(self.layers):
            out, a = attend(i, layer.attn, layer.attn_norm(x), positions)
            x = x + out
            x = x + layer.mlp(layer.mlp_norm(x))
            aux.append(a)
        logits = _mm("btd,dv->btv", self.final_norm(x), self.lm_head[...])
        return logits.astype(jnp.float32), aux

    def __call__(self, tokens, positions=None):
        """Plain causal forward (prefill / oracle). ``tokens [B, T]`` -> ``(logits [B, T, V],
        [(c_latent [B, T, 512], k_rope [B, T, 64]) per layer])``. Right padding is harmless: causal."""
        tokens = jnp.asarray(tokens, jnp.int32)
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
        return self.forward_with(tokens, positions, lambda i, attn, h, pos: attn(h, pos))


def derive_drafter(target: MLADecoder, *, num_layers: int = 1) -> MLADecoder:
    """A drafter made of the target's first ``num_layers`` layers plus its embedding, final norm and
    LM head (copies). It predicts the target's next token often but not always."""
    cfg = target.cfg
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 1 <= num_layers <= cfg.num_layers:
        raise ValueError(f"num_layers must be an int in [1, target num_layers={cfg.num_layers}], got {num_layers!r}")
    graphdef, state = nnx.split(nnx.eval_shape(lambda: MLADecoder(cfg.replace(num_layers=num_layers),
                                                                   rngs=nnx.Rngs(0))))
    src = nnx.to_pure_dict(nnx.state(target))
    src["layers"] = {k: v for k, v in src["layers"].items() if int(k) < num_layers}
    nnx.replace_by_pure_dict(state, src)
    return nnx.merge(graphdef, state)


def init_model(cfg: MLAModelConfig, *, seed: int = 0) -> MLADecoder:
    """A fixed-seed :class:`MLADecoder`, initialised in one compiled call (eager init of every
    parameter dispatches many small ops, which is slow on a busy CPU)."""
    if not isinstance(cfg, MLAModelConfig):
        raise ValueError(f"cfg must be an MLAModelConfig, got {type(cfg).__name__}")
    graphdef, init = _initializer(cfg)
    return nnx.merge(graphdef, init(jax.random.key(int(seed))))


@functools.lru_cache(maxsize=None)
def _initializer(cfg: MLAModelConfig):
    graphdef = nnx.split(nnx.eval_shape(lambda: MLADecoder(cfg, rngs=nnx.Rngs(0))))[0]
    return graphdef, jax.jit(lambda key: nnx.state(MLADecoder(cfg, rngs=nnx.Rngs(key))))

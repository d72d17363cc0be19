"""Recurrent-state sizing for hybrid models (Mamba / KDA layers beside MLA), §9.4 and R17.

The recurrent state is per request, not per token, and is split over heads like an attention TP
shard. Under Helix the CP ranks act as extra TP ranks for these layers; with attention-DP every
rank holds whole requests. The budget estimate and the allocated pool both go through
:func:`effective_tp`, so they cannot disagree.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .cost import Mapping
from .quota import check_int

__all__ = ["RecurrentSpec", "effective_tp", "state_shapes", "state_bytes_per_request", "StatePool",
           "itemsize"]


def itemsize(dtype) -> int:
    """Bytes per element of a dtype name (``"bfloat16"``, ``"float8_e4m3fn"``, ...)."""
    try:
        import ml_dtypes  # noqa: F401  (registers bfloat16 / float8 names with numpy)
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        raise ValueError(f"unknown dtype {dtype!r}") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecurrentSpec:
    """Plain data describing a model's recurrent layers (Mamba2-style; KDA maps onto it).

    KDA (Kimi Delta Attention) fits the same formulas with ``n_groups = num_heads`` and
    ``state_size = head_dim``: a short conv over q, k, v (``3 * H * d`` channels) and a
    ``d x d`` state per head.
    """
    num_layers: int
    num_heads: int
    head_dim: int
    n_groups: int
    state_size: int
    conv_kernel: int
    dtype: str = "bfloat16"
    ssm_dtype: str | None = None   # None -> dtype

    def __post_init__(self):
        for f in ("num_layers", "num_heads", "head_dim", "n_groups", "state_size", "conv_kernel"):
            check_int(f, getattr(self, f), 0 if f == "num_layers" else 1)
        itemsize(self.dtype)
        itemsize(self.ssm_dtype or self.dtype)


def effective_tp(mapping: Mapping) -> int:
    """TP width the recurrent state is split over (§9.4).

    1 with attention-DP (replicated state; takes precedence), ``tp * cp`` under Helix, else ``tp``.
    """
    if not isinstance(mapping, Mapping):
        raise ValueError(f"mapping must be a helix_jax.memory.Mapping, got {type(mapping).__name__}")
    if mapping.attention_dp:
        return 1
    if mapping.cp > 1:
        return mapping.tp * mapping.cp
    return mapping.tp


def state_shapes(spec: RecurrentSpec, mapping: Mapping, num_requests: int) -> dict:
    """Per-rank pool shapes and dtypes for ``num_requests`` requests.

    Returns ``{"conv": ([layers, n, conv_dim, kernel-1], dtype), "ssm": ([layers, n, heads_local,
    head_dim, state_size], ssm_dtype)}`` with ``conv_dim = (head_dim*heads + 2*n_groups*state) // tp_eff``.
    """
    num_requests = check_int("num_requests", num_requests, 0)
    tp = effective_tp(mapping)
    conv_total = spec.head_dim * spec.num_heads + 2 * spec.n_groups * spec.state_size
    if spec.num_heads % tp or conv_total % tp:
        raise ValueError(f"recurrent layers (num_heads={spec.num_heads}, conv channels={conv_total}) "
                         f"do not split over effective TP {tp} (mapping {mapping})")
    conv = ((spec.num_layers, num_requests, conv_total // tp, spec.conv_kernel - 1), spec.dtype)
    ssm = ((spec.num_layers, num_requests, spec.num_heads // tp, spec.head_dim, spec.state_size),
           spec.ssm_dtype or spec.dtype)
    return {"conv": conv, "ssm": ssm}


def state_bytes_per_request(spec: RecurrentSpec | None, mapping: Mapping) -> int:
    """Per-rank recurrent-state bytes of one request (all recurrent layers): the budget estimate.

    ``conv_bytes = conv_dim*(kernel-1)*itemsize``, ``ssm_bytes = heads_local*head_dim*state*itemsize``.
    """
    if spec is None or spec.num_layers == 0:
        return 0
    shapes = state_shapes(spec, mapping, 1)
    return sum(int(np.prod(s)) * itemsize(dt) for s, dt in shapes.values())


class StatePool:
    """Per-rank recurrent-state pool: one slot per concurrent request, shaped by :func:`state_shapes`.

    ``materialize=True`` allocates the arrays (``jnp.zeros``); otherwise only
    ``jax.ShapeDtypeStruct`` descriptors are kept (planning at full model scale).
    """

    def __init__(self, spec: RecurrentSpec, *, mapping: Mapping, max_requests: int,
                 materialize: bool = False):
        import jax
        import jax.numpy as jnp

        self.spec, self.mapping = spec, mapping
        self.max_requests = check_int("max_requests", max_requests)
        self.tp_eff = effective_tp(mapping)
        self.arrays = {}
        for name, (shape, dt) in state_shapes(spec, mapping, self.max_requests).items():
            self.arrays[name] = (jnp.zeros(shape, dt) if materialize
                                 else jax.ShapeDtypeStruct(shape, jnp.dtype(dt)))
        self._free = list(range(self.max_requests))[::-1]
        self._slot: dict = {}

    @property
    def nbytes(self) -> int:
        """Bytes this pool occupies on one rank (from the arrays' own shapes and dtypes)."""
        return sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in self.arrays.values())

    def allocate(self, req_id) -> int:
        """A state slot for ``req_id``; ``ValueError`` if full or already present."""
        if req_id in self._slot:
            raise ValueError(f"req_id {req_id!r} already has a state slot")
        if not self._free:
            raise ValueError(f"state pool full ({self.max_requests} requests)")
        self._slot[req_id] = self._free.pop()
        return self._slot[req_id]

    def free(self, req_id) -> None:
        try:
            self._free.append(self._slot.pop(req_id))
        except KeyError:
            raise ValueError(f"req_id {req_id!r} has no state slot") from None

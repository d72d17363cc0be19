"""Ledger: §2.2/§2.4 invariants as property tests, worked examples A/B/C exactly, R4/R8/R14."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from helix_jax import ledger

CPS = [1, 2, 3, 4, 8]
PAGES = [1, 2, 3, 4, 16, 64]


def brute_local_len(g, r, P, C):
    return sum(1 for p in range(g) if (p // P) % C == r)


@settings(max_examples=60, deadline=None)
@given(C=st.sampled_from(CPS), P=st.sampled_from(PAGES), data=st.data())
def test_local_len_properties(C, P, data):
    g = np.arange(0, 4 * C * P + 3)
    L = np.stack([np.asarray(ledger.local_len(g, r, page_size=P, cp_size=C)) for r in range(C)])
    assert L.dtype == np.int32
    np.testing.assert_array_equal(L.sum(0), g)                             # 1. partition
    d = np.diff(L, axis=1)
    own = np.asarray(ledger.owner(g[:-1], page_size=P, cp_size=C))
    np.testing.assert_array_equal(d, (own[None, :] == np.arange(C)[:, None]).astype(int))  # 2.
    assert (L.max(0) - L.min(0)).max() <= P                                # 3.
    for gg in data.draw(st.lists(st.sampled_from(g.tolist()), min_size=1, max_size=6)):
        for r in range(C):                                                 # 4. brute force
            assert L[r, gg] == brute_local_len(gg, r, P, C)


@settings(max_examples=80, deadline=None)
@given(C=st.sampled_from(CPS), P=st.sampled_from(PAGES), G=st.integers(1, 8),
       p0s=st.lists(st.integers(0, 600), min_size=1, max_size=5))
def test_verify_metadata_invariants(C, P, G, p0s):
    pos = np.array(p0s)[:, None] + np.arange(G)
    metas = [ledger.verify_metadata(pos, r, page_size=P, cp_size=C) for r in range(C)]
    own = np.asarray(ledger.owner(pos, page_size=P, cp_size=C))
    bsum = np.zeros_like(pos)
    for r, m in enumerate(metas):
        slots, bounds = np.asarray(m.local_slots), np.asarray(m.kv_bounds)
        kv, cached, owned = map(np.asarray, (m.kv_lens, m.cached_lens, m.owned_new_tokens))
        assert slots.dtype == bounds.dtype == kv.dtype == np.int32
        np.testing.assert_array_equal(slots >= 0, own == r)
        np.testing.assert_array_equal(slots[slots >= 0], bounds[slots >= 0] - 1)
        assert (cached[:, None] <= bounds).all() and (bounds <= kv[:, None]).all()
        step = np.diff(np.concatenate([cached[:, None], bounds], 1), axis=1)
        np.testing.assert_array_equal(step, (own == r).astype(int))
        np.testing.assert_array_equal(owned, kv - cached)
        np.testing.assert_array_equal(kv, bounds[:, -1])
        bsum += bounds
    np.testing.assert_array_equal(bsum, pos + 1)                           # visible sets partition [0, pos]
    np.testing.assert_array_equal(sum(np.asarray(m.kv_lens) for m in metas), pos[:, 0] + G)
    np.testing.assert_array_equal(sum(np.asarray(m.owned_new_tokens) for m in metas), G)
    if G <= P:  # at most two owners, each a contiguous run
        for row in own:
            assert len(set(row.tolist())) <= 2
            changes = np.count_nonzero(np.diff(row))
            assert changes <= 1


def _meta(p0, G, r, C, P):
    m = ledger.verify_metadata(np.array([[p0 + j for j in range(G)]]), r, page_size=P, cp_size=C)
    return [np.asarray(x).tolist() for x in m]


def test_worked_example_A():
    assert _meta(6, 4, 0, 2, 4) == [[[-1, -1, 4, 5]], [[4, 4, 5, 6]], [6], [4], [2]]
    assert _meta(6, 4, 1, 2, 4) == [[[2, 3, -1, -1]], [[3, 4, 4, 4]], [4], [2], [2]]
    assert np.asarray(ledger.owner(np.arange(6, 10), page_size=4, cp_size=2)).tolist() == [1, 1, 0, 0]


def test_worked_example_B_tail_page_only():
    assert _meta(2, 4, 0, 2, 4) == [[[2, 3, -1, -1]], [[3, 4, 4, 4]], [4], [2], [2]]
    slots, bounds, kv, cached, owned = _meta(2, 4, 1, 2, 4)
    assert slots == [[-1, -1, 0, 1]] and bounds == [[0, 0, 1, 2]] and kv == [2]
    # R1: kv_len is non-zero yet tokens 0 and 1 see no local KV.
    assert (np.array(bounds[0]) == 0).tolist() == [True, True, False, False]


def test_worked_example_C():
    assert _meta(126, 4, 0, 2, 64)[:3] == [[[-1, -1, 64, 65]], [[64, 64, 65, 66]], [66]]
    assert _meta(126, 4, 1, 2, 64)[:3] == [[[62, 63, -1, -1]], [[63, 64, 64, 64]], [64]]
    assert _meta(61, 8, 0, 4, 64)[:3] == [[[61, 62, 63] + [-1] * 5], [[62, 63, 64, 64, 64, 64, 64, 64]], [64]]
    assert _meta(61, 8, 1, 4, 64)[:3] == [[[-1, -1, -1, 0, 1, 2, 3, 4]], [[0, 0, 0, 1, 2, 3, 4, 5]], [5]]
    for r in (2, 3):  # R10: whole-sequence empty ranks
        assert _meta(61, 8, r, 4, 64)[:3] == [[[-1] * 8], [[0] * 8], [0]]


def test_traced_rank_jit_and_vmap():
    pos = jnp.array([[6, 7, 8, 9], [2, 3, 4, 5]])
    f = jax.jit(lambda p, r: ledger.verify_metadata(p, r, page_size=4, cp_size=2))
    for r in range(2):
        eager = ledger.verify_metadata(pos, r, page_size=4, cp_size=2)
        for a, b in zip(f(pos, r), eager):
            np.testing.assert_array_equal(a, b)
    per_rank = jax.vmap(lambda r: ledger.kv_bounds(pos, r, page_size=4, cp_size=2))(jnp.arange(2))
    np.testing.assert_array_equal(per_rank.sum(0), pos + 1)
    # broadcasting: positions [T] against ranks [C, 1]
    lens = ledger.local_len(jnp.arange(10)[None, :], jnp.arange(3)[:, None], page_size=2, cp_size=3)
    assert lens.shape == (3, 10)


def test_overlap_correction_R4():
    stale = np.array([[8, 9, 10, 11]])            # host assumed all 3 drafts accepted; really 1
    fixed = ledger.correct_positions(stale, np.array([1]), 3)
    assert np.asarray(fixed).tolist() == [[6, 7, 8, 9]]
    assert _meta(6, 4, 0, 2, 4)[0] == [np.asarray(ledger.verify_metadata(fixed, 0, page_size=4, cp_size=2).local_slots).tolist()[0]]
    # the stale base would have given wrong arrays (the spec's counter-example)
    stale_r0 = ledger.verify_metadata(stale, 0, page_size=4, cp_size=2)
    assert np.asarray(stale_r0.local_slots).tolist() == [[4, 5, 6, 7]]
    # rows without a predecessor in flight are untouched
    both = ledger.correct_positions(np.array([[8, 9, 10, 11], [3, 4, 5, 6]]), np.array([1, 0]), 3,
                                    in_flight=np.array([True, False]))
    assert np.asarray(both).tolist() == [[6, 7, 8, 9], [3, 4, 5, 6]]


def test_overlap_plain_decode_R14():
    # G = 1, draft_len = 0: the correction is zero, positions must advance L, L+1, L+2 (never repeat).
    L, seen = 10, []
    for step in range(4):
        pos = ledger.correct_positions(np.array([[L + step]]), np.array([0]), 0)
        seen.append(int(np.asarray(pos)[0, 0]))
    assert seen == [10, 11, 12, 13]


def test_non_uniform_and_non_consecutive_groups_R8():
    with pytest.raises(ValueError, match="uniform"):
        ledger.verify_metadata([[1, 2, 3, 4], [5]], 0, page_size=4, cp_size=2)
    with pytest.raises(ValueError, match="not consecutive"):
        ledger.verify_metadata(np.array([[1, 2, 4, 5]]), 0, page_size=4, cp_size=2)
    with pytest.raises(ValueError, match="uniform verify"):
        ledger.pack_groups(np.arange(9), group_len=4, num_generations=2)
    with pytest.raises(ValueError, match="uniform verify"):
        ledger.pack_groups(np.arange(8), group_len=4, num_generations=3)
    assert ledger.pack_groups(np.arange(8), group_len=4, num_generations=2).shape == (2, 4)


@pytest.mark.parametrize("kw, match", [
    (dict(page_size=0, cp_size=2), "page_size"), (dict(page_size=4, cp_size=0), "cp_size"),
    (dict(page_size=2.0, cp_size=2), "page_size"), (dict(page_size=4, cp_size=True), "cp_size")])
def test_bad_layout(kw, match):
    with pytest.raises(ValueError, match=match):
        ledger.owner(np.arange(4), **kw)


def test_bad_dtypes_and_accepted_range():
    with pytest.raises(ValueError, match="positions must be an integer"):
        ledger.kv_bounds(np.array([1.5]), 0, page_size=4, cp_size=2)
    with pytest.raises(ValueError, match="accepted must lie"):
        ledger.correct_positions(np.array([[8, 9]]), np.array([3]), 1)
    with pytest.raises(ValueError, match="draft_len"):
        ledger.correct_positions(np.array([[8, 9]]), np.array([0]), -1)

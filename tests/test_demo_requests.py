"""``python -m helix_jax demo --requests N``: continuous batching in the demo (issue 7).

Runs the demo in-process (both runs share the compiled prefill) on a cp = 2 mesh and checks, from its
JSON, that every request's tokens equal plain greedy decoding of that prompt alone (recomputed here
with the cp = 1, no-draft oracle), that requests joined and left between steps, and that a small page
pool makes requests wait for pages without changing any token.
"""
import contextlib
import io
import json

import numpy as np
import pytest

from helix_jax.__main__ import main

SMALL = ("--cp", "2", "--max-batch", "2", "--new-tokens", "8", "--prompt-range", "4", "12", "--draft-len", "3",
         "--page-size", "4", "--check", "--json", "--no-progress")


def _demo(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["demo", *args])
    return rc, out.getvalue(), err.getvalue()


def _greedy(prompts, n):
    from helix_jax.models import MLAModelConfig, init_model
    from helix_jax.spec import greedy_reference

    lens = np.array([len(p) for p in prompts])
    batch = np.zeros((len(prompts), lens.max()), np.int32)
    for i, p in enumerate(prompts):
        batch[i, : len(p)] = p
    return greedy_reference(init_model(MLAModelConfig(), seed=0), batch, lens, n)


def _check_tokens(out, n_req):
    assert out["requests"] == n_req and len(out["tokens"]) == n_req
    assert [len(p) for p in out["prompts"]] == out["prompt_lens"]
    assert all(4 <= n <= 12 for n in out["prompt_lens"])
    ref = _greedy(out["prompts"], 8)
    for i, toks in enumerate(out["tokens"]):
        assert toks == ref[i].tolist(), f"request {i}"
    assert out["identical_to_greedy"] is True and out["identical_per_request"] == [True] * n_req
    assert out["tokens_emitted"] == sum(len(t) - 1 for t in out["tokens"]) == n_req * 7
    assert 1.0 <= out["mean_accepted_length"] <= out["draft_len"] + 1


def test_demo_requests_identical_to_greedy_and_pool_limits(rng):
    seed = int(rng.integers(1 << 16))
    rc, stdout, err = _demo("--requests", "5", "--seed", str(seed), *SMALL)
    assert rc == 0, err[-2000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    assert "identical to greedy per request  yes (5 of 5)" in stdout and "peak super-blocks" in stdout
    _check_tokens(out, 5)
    admit, finish = out["admit_step"], out["finish_step"]
    # Requests joined and left between steps: 5 requests through 2 rows.
    assert out["max_batch"] == 2 and out["peak_active"] == 2
    assert len(set(admit)) > 1 and len(set(finish)) > 1
    assert all(a >= arr for a, arr in zip(admit, out["arrival_step"])) and all(f > a for a, f in zip(admit, finish))
    # finish_step = the step a request finished in; its row is free from the next step on.
    assert any(admit[j] > finish[i] for i in range(5) for j in range(5) if i != j)        # a freed row reused
    assert out["steps"] + out["idle_steps"] == max(finish) + 1

    # A pool of 3 usable pages per rank: each request reserves 2-3 super-blocks, so only one runs at a
    # time although 2 rows are free; the others wait for pages. Tokens must not change.
    rc, stdout, err = _demo("--requests", "5", "--seed", str(seed), "--num-pages", "4", *SMALL)
    assert rc == 0, err[-2000:]
    small = json.loads(stdout.strip().splitlines()[-1])
    _check_tokens(small, 5)
    assert small["tokens"] == out["tokens"] and small["prompts"] == out["prompts"]
    assert small["num_pages"] == 4 and small["peak_active"] == 1 and small["peak_superblocks"] <= 3
    spans = sorted(zip(small["admit_step"], small["finish_step"]))
    assert all(f < a for (_, f), (a, _) in zip(spans, spans[1:]))                      # one at a time
    assert small["steps"] > out["steps"]


@pytest.mark.parametrize("args, msg", [
    (("--requests", "3", "--cp", "2", "--num-pages", "2", "--prompt-range", "4", "12"), "--num-pages"),
    (("--requests", "3", "--steps", "5"), "--new-tokens"),
    (("--requests", "0",), "--requests must be >= 1"),
    (("--requests", "2", "--prompt-range", "9", "3"), "--prompt-range"),
    (("--requests", "2", "--save", "x"), "--save does not apply"),
])
def test_demo_requests_bad_flags_exit_2(args, msg):
    rc, _, err = _demo(*args)
    assert rc == 2 and msg in err, err

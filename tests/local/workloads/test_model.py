"""The tiny transformer learns the synthetic corpus; data and sampling are deterministic."""

from __future__ import annotations

import jax
import numpy as np

from elastic_training.local.workloads import model
from elastic_training.local.workloads.config import ModelConfig

DIMS = model.Dims.from_config(ModelConfig())


def test_corpus_is_a_pure_function_of_split_and_index() -> None:
    a = model.corpus_batch("train", 3, 4, DIMS)
    assert a.shape == (4, DIMS.length) and a.dtype == np.int32
    np.testing.assert_array_equal(a, model.corpus_batch("train", 3, 4, DIMS))
    assert not np.array_equal(a, model.corpus_batch("train", 4, 4, DIMS))
    assert not np.array_equal(a, model.corpus_batch("eval", 3, 4, DIMS))
    assert a.min() >= 0 and a.max() < DIMS.vocab


def test_corpus_is_learnable() -> None:
    assert model.corpus_entropy(DIMS.vocab) < 0.5 * np.log(DIMS.vocab)


def test_training_loss_goes_down() -> None:
    state = model.init_state(DIMS, seed=0, learning_rate=3e-3)
    step = model.make_train_step(DIMS.heads, 3e-3)
    losses = []
    for i in range(40):
        state, loss = step(state, model.corpus_batch("train", i, 8, DIMS))
        losses.append(float(loss))
    assert int(state["step"]) == 40
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 1.0
    assert losses[0] == np.float32(losses[0]) and abs(losses[0] - np.log(DIMS.vocab)) < 0.5


def test_sampling_is_deterministic_for_a_seed() -> None:
    params = model.init_params(DIMS, seed=0)
    prompts = np.arange(3, dtype=np.int32)
    a = model.sample(params, DIMS, prompts, 10, temperature=1.0, seed=7)
    b = model.sample(params, DIMS, prompts, 10, temperature=1.0, seed=7)
    c = model.sample(params, DIMS, prompts, 10, temperature=1.0, seed=8)
    assert a.shape == (3, 10)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(a[:, 0], prompts)
    greedy = model.sample(params, DIMS, prompts, 10, temperature=0.0, seed=1)
    np.testing.assert_array_equal(greedy, model.sample(params, DIMS, prompts, 10, temperature=0.0, seed=2))
    assert jax.devices()[0].platform == "cpu"

"""A tiny decoder-only transformer in plain JAX, and the deterministic synthetic corpus it learns.

The corpus is a fixed first-order Markov chain over the vocabulary in which every token has a handful of
likely successors, so a model can get well below the uniform loss `log(vocab_size)`. Batches are a pure
function of (split, step), which makes a resumed run see the same data as an uninterrupted one.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from elastic_training.local.workloads.config import ModelConfig

Params = dict[str, Any]
TrainState = dict[str, Any]

_CORPUS_SEED = 1234
_SUCCESSORS = 4
_SPLITS = {"train": 0, "eval": 1}


class Dims(NamedTuple):
    """Static model dimensions."""

    vocab: int
    emb: int
    layers: int
    heads: int
    length: int

    @classmethod
    def from_config(cls, config: ModelConfig) -> Dims:
        """Read the MaxText size keys."""
        return cls(
            vocab=config.vocab_size,
            emb=config.base_emb_dim,
            layers=config.base_num_decoder_layers,
            heads=config.base_num_query_heads,
            length=config.max_target_length,
        )


def init_params(dims: Dims, seed: int) -> Params:
    """Initialise parameters; decoder layers are stacked on a leading axis and run with `lax.scan`."""
    d, n, hidden = dims.emb, dims.layers, 4 * dims.emb
    keys = jax.random.split(jax.random.PRNGKey(seed), 6)

    def dense(key: jax.Array, shape: tuple[int, ...], fan_in: int) -> jax.Array:
        return jax.random.normal(key, shape, jnp.float32) / math.sqrt(fan_in)

    return {
        "token_embedding": jax.random.normal(keys[0], (dims.vocab, d), jnp.float32) * 0.02,
        "position_embedding": jax.random.normal(keys[1], (dims.length, d), jnp.float32) * 0.02,
        "decoder": {
            "attention_norm": jnp.ones((n, d), jnp.float32),
            "qkv": dense(keys[2], (n, d, 3 * d), d),
            "out": dense(keys[3], (n, d, d), d) / math.sqrt(2 * n),
            "mlp_norm": jnp.ones((n, d), jnp.float32),
            "mlp_in": dense(keys[4], (n, d, hidden), d),
            "mlp_out": dense(keys[5], (n, hidden, d), hidden) / math.sqrt(2 * n),
        },
        "final_norm": jnp.ones((d,), jnp.float32),
    }


def _rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def apply(params: Params, tokens: jax.Array, heads: int) -> jax.Array:
    """Logits `[batch, length, vocab]` for `tokens` `[batch, length]` (causal self-attention)."""
    _, length = tokens.shape
    x = params["token_embedding"][tokens] + params["position_embedding"][:length]
    causal = jnp.tril(jnp.ones((length, length), bool))

    def layer(x: jax.Array, w: dict[str, jax.Array]) -> tuple[jax.Array, None]:
        b, t, d = x.shape
        q, k, v = jnp.split(_rms_norm(x, w["attention_norm"]) @ w["qkv"], 3, axis=-1)
        q, k, v = (a.reshape(b, t, heads, d // heads) for a in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // heads)
        weights = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, t, d) @ w["out"]
        x = x + jax.nn.gelu(_rms_norm(x, w["mlp_norm"]) @ w["mlp_in"]) @ w["mlp_out"]
        return x, None

    x, _ = jax.lax.scan(layer, x, params["decoder"])
    logits: jax.Array = _rms_norm(x, params["final_norm"]) @ params["token_embedding"].T
    return logits


def loss_fn(params: Params, tokens: jax.Array, heads: int) -> jax.Array:
    """Mean next-token cross-entropy over the batch."""
    logits = apply(params, tokens[:, :-1], heads)
    losses: jax.Array = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
    return losses.mean()


def optimizer(learning_rate: float) -> optax.GradientTransformation:
    """The optimizer of the trainer (Adam; its state is part of every checkpoint)."""
    return optax.adam(learning_rate)


def init_state(dims: Dims, seed: int, learning_rate: float) -> TrainState:
    """A fresh train state: `params`, `opt_state` and `step` (the next step to run), as MaxText keeps it."""
    params = init_params(dims, seed)
    return {
        "params": params,
        "opt_state": optimizer(learning_rate).init(params),
        "step": jnp.zeros((), jnp.int32),
    }


def make_train_step(
    heads: int, learning_rate: float, *, donate_state: bool = False
) -> Any:  # a jitted (state, tokens) -> (state, loss)
    """One jitted training step; JAX keeps one compiled executable per input sharding (device set).

    `donate_state` lets XLA write the new state over the old one, as MaxText's ``train.py`` jits its step
    (``donate_argnums=0``): at Qwen3-0.6B's size two fp32 states and Adam's moments do not fit in 16 GiB of HBM.
    The caller must not read a state after passing it in.
    """
    tx = optimizer(learning_rate)

    def step(state: TrainState, tokens: jax.Array) -> tuple[TrainState, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], tokens, heads)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        return {"params": params, "opt_state": opt_state, "step": state["step"] + 1}, loss

    return jax.jit(step, donate_argnums=0 if donate_state else ())


@functools.lru_cache(maxsize=8)
def _transitions(vocab: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(_CORPUS_SEED)
    successors = np.stack([rng.choice(vocab, _SUCCESSORS, replace=False) for _ in range(vocab)])
    weights = rng.dirichlet(np.full(_SUCCESSORS, 0.5), size=vocab)
    return successors, np.cumsum(weights, axis=1)


def corpus_batch(split: str, index: int, batch: int, dims: Dims) -> np.ndarray:
    """Token sequences `[batch, length]` of the synthetic corpus: a pure function of its arguments."""
    successors, cumulative = _transitions(dims.vocab)
    rng = np.random.default_rng([_CORPUS_SEED, _SPLITS[split], index, batch])
    tokens = np.empty((batch, dims.length), np.int32)
    tokens[:, 0] = rng.integers(0, dims.vocab, batch)
    draws = rng.random((batch, dims.length))
    for t in range(1, dims.length):
        prev = tokens[:, t - 1]
        choice = (draws[:, t, None] > cumulative[prev]).sum(axis=1).clip(max=_SUCCESSORS - 1)
        tokens[:, t] = successors[prev, choice]
    return tokens


def corpus_entropy(vocab: int) -> float:
    """The corpus' entropy rate in nats per token: the lowest loss any model can reach."""
    _, cumulative = _transitions(vocab)
    p = np.diff(cumulative, axis=1, prepend=0.0)
    return float(-(p * np.log(np.clip(p, 1e-12, None))).sum(axis=1).mean())


# One jitted function for every call (parameters are an argument, not constants of a closure): JAX compiles it
# once per shape, head count and temperature in a process instead of once per `sample` call.
@functools.partial(jax.jit, static_argnames=("heads", "temperature"))
def _next_tokens(
    params: Params, tokens: jax.Array, position: jax.Array, key: jax.Array, *, heads: int, temperature: float
) -> jax.Array:
    logits = apply(params, tokens, heads)
    last = jax.lax.dynamic_index_in_dim(logits, position - 1, axis=1, keepdims=False)
    if temperature == 0:
        return jnp.argmax(last, axis=-1).astype(jnp.int32)
    return jax.random.categorical(key, last / temperature, axis=-1).astype(jnp.int32)


def sample(params: Params, dims: Dims, prompts: np.ndarray, length: int, temperature: float, seed: int) -> np.ndarray:
    """Autoregressively extend one-token `prompts` to `length` tokens (temperature 0 is greedy)."""
    tokens = jnp.zeros((prompts.shape[0], dims.length), jnp.int32).at[:, 0].set(jnp.asarray(prompts))
    key = jax.random.PRNGKey(seed)
    for position in range(1, length):
        key, sub = jax.random.split(key)
        chosen = _next_tokens(params, tokens, jnp.int32(position), sub, heads=dims.heads, temperature=temperature)
        tokens = tokens.at[:, position].set(chosen)
    return np.asarray(tokens[:, :length])

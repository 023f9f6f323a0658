"""Every random stream of a run, named in one place.

A draw never touches global RNG state: each stream is a generator seeded from the
scenario seed, the keys that make it replayable (server round, client id) and the
stream's own salt, so the in-process, Simulation and Deployment engines draw the same
numbers and a resumed run repeats what it drew. Numpy's ``default_rng`` takes the key
list as entropy for a ``SeedSequence``: ``stream(name, seed, *keys)`` is
``default_rng([seed, *keys, SALTS[name]])``.

The salts are the ones results were produced with; changing one changes results.
Every stream has its own salt (two streams keyed alike on one salt would draw the same
numbers: ``fedavg-s-subsample`` shared ``ram-relay``'s 0x5A3 until 2026-11-23).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

SALTS: dict[str, int] = {
    # data (fedram_flwr.data.federated): per seed
    "data-split": 0xDA7A,  # class subsampling, partitions, generated data sets
    "test-split": 0x7E57,  # per-client train/validation/test split
    # availability laws (fedram_flwr.availability): per seed, or per (seed, round)
    "ram-rho": 0x4A3,  # the RAM's rho drawn by the paper's recipe
    "markov-law": 0xCAFED,  # CA-Fed's generator of (pi, lambda)
    "ram-relay": 0x5A3,  # (seed, round): the RAM's m relayed clients
    "markov-step": 0x3A7,  # (seed, round): the chains' uniforms of one step
    "connected-sample": 0xC0C,  # (seed, round): m of the connected SuperNodes
    "fedawe-phi": 0xFAE0,  # FedAWE's per-class phi_c ~ U(0, Phi_c) (App. J.3)
    "nonstationary-step": 0xFAE1,  # (seed, round): uniforms of p_i^t = p_i f_i(t) draws
    "min-separation-draw": 0x5E9A,  # (seed, round): the m participants under separation R
    "cyclic-sample": 0xC7C1,  # (seed, round): m of the clients in their cyclic window
    "diurnal-slot": 0xD1A1,  # (seed, time slot): uniforms of the diurnal law's draws
    # the time model (fedram_flwr.clock): per seed
    "device-speeds": 0xDE75,  # each client's (compute, bandwidth) standard normals
    "over-selection": 0x0E5E,  # (seed, round): the clients an over-selecting round starts
    # strategies: per (seed, round)
    "fedavg-s-subsample": 0xF5A5,  # FedAvg(S): S of the available clients
    "rcfl-draws": 0x2CF1,  # RC-FL: K clients drawn with replacement by p_i
    # asynchronous strategies: per (seed, draw number)
    "fedbuff-select": 0xFB0F,  # FedBuff: the idle available clients started to refill C
    # clients: per (seed, round, client)
    "client-batches": 0xC11E,  # the mini-batch order of a client's local steps
    # models: per seed (fedram_flwr.clients.models.build_model)
    "dropout-masks": 0xD80F,  # the generators of a model's dropout layers
}


def stream(name: str, seed: int, *keys: int) -> np.random.Generator:
    """The generator of stream ``name`` for ``seed`` and ``keys`` (round, client, ...)."""
    try:
        salt = SALTS[name]
    except KeyError:
        raise ValueError(f"unknown random stream {name!r}; known: {sorted(SALTS)}") from None
    entropy = [seed, *keys, salt]
    if all(type(k) is int and 0 <= k < 2**32 for k in entropy):
        # One 32-bit word each: the entropy pool numpy makes of the list (the same
        # generator), without its conversion of each int to an array (~4 us a stream).
        return np.random.default_rng(np.array(entropy, dtype=np.uint32))
    return np.random.default_rng(entropy)


def streams(name: str, keys: Sequence[Sequence[int]]) -> Iterator[np.random.Generator]:
    """The generators of stream ``name`` for each ``(seed, *keys)`` in ``keys``, in order:
    the same draws as ``stream(name, seed, *keys)`` each, for many streams at once.

    numpy's seeding (``SeedSequence``'s entropy mixing and state words, then PCG64's
    initial state) runs vectorised over the streams (:func:`pcg64_states`), and one
    generator is set to each stream's state in turn (~3 us a stream instead of ~10 for a
    generator of its own). So a generator is valid until the next is taken: draw from it
    first. Where the fast seeding does not apply (entropy of other than four 32-bit
    words), or would not give numpy's generator (checked on the first stream of every
    call: a numpy whose seeding changed), each stream is :func:`stream`'s own generator.
    """
    if name not in SALTS:
        stream(name, 0)  # the error naming the known streams
    salt = SALTS[name]
    entropy = [[*k, salt] for k in keys]
    fits = all(len(e) == 4 and all(type(v) is int and 0 <= v < 2**32 for v in e) for e in entropy)
    if not entropy or not fits:
        yield from (stream(name, *k) for k in keys)
        return
    states = pcg64_states(np.array(entropy, dtype=np.uint32))
    shared = np.random.Generator(np.random.PCG64(0))
    for i, (state, inc) in enumerate(states):
        shared.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": state, "inc": inc},
            "has_uint32": 0,
            "uinteger": 0,
        }
        if i == 0 and shared.bit_generator.state != stream(name, *keys[0]).bit_generator.state:
            yield from (stream(name, *k) for k in keys)  # numpy seeds otherwise: its own way
            return
        yield shared


_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _PCG_MULT = 0xCA01F9DD, 0x4973F715, 0x2360ED051FC65DA44385DF649FCCF645
_M32, _M128 = 2**32 - 1, 2**128 - 1


def pcg64_states(entropy: np.ndarray) -> list[tuple[int, int]]:
    """PCG64's initial (state, increment) of ``default_rng(row)`` for every row of
    ``entropy`` (``[streams, 4]`` uint32): ``SeedSequence``'s mixing of a four-word pool
    (its ``mix_entropy``, hash constants independent of the data) and its four uint64
    state words (``generate_state(4, np.uint64)``), vectorised over the rows, then PCG64's
    seeding (``pcg_setseq_128_srandom_r``) in Python's integers. numpy's own
    ``bit_generator.pyx`` and ``pcg64.h`` (1.17 to 2.x) are the reference; tests compare
    every result with ``default_rng``."""
    hash_const = _INIT_A

    def hashmix(value: np.ndarray) -> np.ndarray:
        nonlocal hash_const
        value = value ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_A) & _M32
        value = value * np.uint32(hash_const)
        return value ^ (value >> np.uint32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        result = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
        return result ^ (result >> np.uint32(16))

    with np.errstate(over="ignore"):  # uint32 arithmetic wraps, as the C code's does
        pool = [hashmix(entropy[:, i]) for i in range(4)]
        for src in range(4):
            for dst in range(4):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        hash_const, words = _INIT_B, []
        for i in range(8):
            value = pool[i % 4] ^ np.uint32(hash_const)
            hash_const = (hash_const * _MULT_B) & _M32
            value = value * np.uint32(hash_const)
            words.append(value ^ (value >> np.uint32(16)))
    w = np.stack(words, axis=1).astype(np.uint64)
    halves = (w[:, 0::2] | (w[:, 1::2] << np.uint64(32))).tolist()  # little-endian pairs
    out = []
    for high, low, inc_high, inc_low in halves:
        inc = ((((inc_high << 64) | inc_low) << 1) | 1) & _M128
        state = (((inc + ((high << 64) | low)) & _M128) * _PCG_MULT + inc) & _M128
        out.append((state, inc))
    return out

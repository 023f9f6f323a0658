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

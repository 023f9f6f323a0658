"""Availability oracles: Flower ClientManagers that decide who participates.

The server cannot choose its clients: ``sample()`` ignores how many the strategy asks
for and relays whoever the oracle's law yields in that round. Every draw is a pure
function of ``(seed, round)`` (``draw``), so a run replays exactly in every engine and
after a restart. Oracles know clients by *partition id*, asked once per client through
``get_properties`` (Flower's engines name nodes by random node ids). Strategies never
see the oracle's parameters (e.g. rho, p_k, pi_k, lambda_k).

Oracles (registered by short name in :mod:`fedram_flwr.registry`):

- ``ram``: Random Access Model (Fed-CVaR-Avg), m clients per round drawn by rho;
- ``bernoulli``: client k active with probability p_k, independently (FedAR Sec. 6.1);
- ``markov``: a two-state Markov chain per client with stationary availability pi_k and
  correlation lambda_k (CA-Fed Sec. III-D, V-A);
- ``clustered``: one such chain per cluster switches all its clients (CA-Fed V-B e);
- ``cyclic``: client k active in a window of each period;
- ``trace``: replay of a recorded round x client matrix (CSV) or active ids (JSON);
- ``connected``: physical availability for the Deployment Engine: whoever is connected
  (and has not failed) answers; the one oracle whose draw is *not* a function of
  (seed, round).

The first six *emulate* availability on top of the connected nodes (they wait for all
of them); ``connected`` passes the devices' own availability through. All but the RAM
relay *every* active client: the strategy decides their weights. ``round_timeout``
(seconds, None: unbounded) is the legacy server loop's round timeout the ServerApp
uses with the oracle: a reply later than that counts as a failure.
"""

from __future__ import annotations

import json
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from logging import WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.common import GetPropertiesIns
from flwr.common.logger import log
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.criterion import Criterion

from fedram_flwr.protocol import PARTITION_ID  # noqa: F401  (re-exported)
from fedram_flwr.rng import stream


class AvailabilityError(RuntimeError):
    """The oracle cannot relay: too few clients connected, or unknown partition ids."""


class OracleClientManager(ClientManager):
    """Base of every oracle: registry of proxies by partition id, bounded waits, and a
    round counter that advances once per ``sample`` call (one per server round)."""

    round_timeout: float | None = None

    def __init__(self, num_clients: int, seed: int, *, wait_timeout: float = 120.0) -> None:
        self.num_clients = num_clients
        self.seed = seed
        self.wait_timeout = wait_timeout
        self.round = 0
        self.last_active: list[int] = []  # partition ids drawn in ``self.round``
        self._clients: dict[str, ClientProxy] = {}
        self._by_partition: dict[int, ClientProxy] = {}
        self._cv = threading.Condition()

    # ------------------------------------------------------------- the oracle's law
    @abstractmethod
    def draw(self, server_round: int) -> list[int]:
        """Partition ids relayed in ``server_round``: a pure function of (seed, round)."""

    def availability_matrix(self, num_rounds: int) -> np.ndarray:
        """Rounds 1..num_rounds x clients, True where ``draw`` relays the client (row
        r - 1 is round r; for the RAM, the relayed one-hot rows)."""
        out = np.zeros((num_rounds, self.num_clients), dtype=bool)
        for r in range(1, num_rounds + 1):
            out[r - 1, self.draw(r)] = True
        return out

    # ---------------------------------------------------------- ClientManager API
    def num_available(self) -> int:
        with self._cv:
            return len(self._clients)

    def register(self, client: ClientProxy) -> bool:
        with self._cv:
            if client.cid in self._clients:
                return False
            self._clients[client.cid] = client
            self._cv.notify_all()
            return True

    def unregister(self, client: ClientProxy) -> None:
        with self._cv:
            self._clients.pop(client.cid, None)
            self._by_partition = {
                p: c for p, c in self._by_partition.items() if c.cid != client.cid
            }
            self._cv.notify_all()

    def all(self) -> dict[str, ClientProxy]:
        with self._cv:
            return dict(self._clients)

    def wait_for(self, num_clients: int, timeout: int = 86400) -> bool:
        with self._cv:
            return self._cv.wait_for(
                lambda: len(self._clients) >= num_clients, timeout=min(timeout, self.wait_timeout)
            )

    def sample(
        self,
        num_clients: int,
        min_num_clients: int | None = None,
        criterion: Criterion | None = None,
    ) -> list[ClientProxy]:
        """Advance one round and relay the oracle's clients (``num_clients`` ignored).
        A round in which no client is available relays nobody, and says so: Flower's
        server then skips training and keeps the model."""
        self.round += 1
        self._resolve_partitions()
        self.last_active = self.draw(self.round)
        if not self.last_active:
            log(
                WARNING,
                "round %d: no client is available (%s oracle); the round trains nobody",
                self.round,
                type(self).__name__,
            )
        return [self._by_partition[p] for p in self.last_active]

    # ---------------------------------------------------------------- internals
    def _resolve_partitions(self) -> None:
        """Learn every proxy's partition id once (waits, bounded, for all clients)."""
        if len(self._by_partition) == self.num_clients:
            return
        start = time.monotonic()
        if not self.wait_for(self.num_clients, timeout=int(self.wait_timeout)):
            raise AvailabilityError(
                f"only {self.num_available()} of data.num_clients={self.num_clients} clients "
                f"connected within {time.monotonic() - start:.0f} s; start one SuperNode per "
                f"client (flwr run: --federation-config 'num-supernodes={self.num_clients}')"
            )
        for pid, proxy in self._ask_partitions(self._unknown(), self.wait_timeout):
            if isinstance(pid, BaseException):
                raise pid
            if not 0 <= pid < self.num_clients or pid in self._by_partition:
                raise AvailabilityError(
                    f"client {proxy.cid} reports partition id {pid}: expected a unique id "
                    f"in 0..{self.num_clients - 1}"
                )
            self._by_partition[pid] = proxy
        if len(self._by_partition) != self.num_clients:
            raise AvailabilityError(
                f"partition ids {sorted(set(range(self.num_clients)) - set(self._by_partition))}"
                " are missing among the connected clients"
            )

    def _unknown(self) -> list[ClientProxy]:
        """Connected proxies whose partition id is not known yet."""
        known = {c.cid for c in self._by_partition.values()}
        return [c for cid, c in self.all().items() if cid not in known]

    @staticmethod
    def _ask_partitions(
        proxies: list[ClientProxy], timeout: float
    ) -> list[tuple[int | BaseException, ClientProxy]]:
        """Each proxy's partition id (``get_properties``, in parallel), or the error
        that asking it raised."""

        def ask(proxy: ClientProxy) -> tuple[int | BaseException, ClientProxy]:
            try:
                res = proxy.get_properties(
                    GetPropertiesIns(config={}), timeout=timeout, group_id=None
                )
            except Exception as err:  # noqa: BLE001 - the caller decides
                return err, proxy
            if PARTITION_ID not in res.properties:
                return AvailabilityError(
                    f"client {proxy.cid} did not report '{PARTITION_ID}' in get_properties"
                ), proxy
            return int(res.properties[PARTITION_ID]), proxy

        if not proxies:
            return []
        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(ask, proxies))


# ------------------------------------------------------------- Random Access Model
def ram_probabilities(
    num_clients: int,
    num_rare: int,
    rng: np.random.Generator,
    rare_rho: Sequence[float] | None = None,
) -> np.ndarray:
    """RAM law as in the paper's experiments: rho_i ~ U(0, 1) normalised, sorted so the
    ``num_rare`` least likely users are the last ids. ``rare_rho`` pins those users'
    probabilities (Table 1: 0.0107, 0.0078, 0.0053); the others then share the rest,
    each above the largest rare one."""
    if rare_rho is None:
        u = rng.uniform(size=num_clients)
        return np.sort(u / u.sum())[::-1].copy()
    rare = np.sort(np.asarray(rare_rho, dtype=float))[::-1]
    k_f = num_clients - len(rare)
    spare = 1.0 - rare.sum() - k_f * rare.max()
    if len(rare) != num_rare or spare <= 0:
        raise ValueError(
            f"availability.params.rare_rho: need {num_rare} values whose sum plus "
            f"{k_f} x their max stays below 1, got {list(rare_rho)}"
        )
    u = rng.uniform(size=k_f)
    frequent = rare.max() + spare * u / u.sum()
    return np.concatenate([np.sort(frequent)[::-1], rare])


def ram_relay(rho: np.ndarray, m: int, seed: int, server_round: int) -> list[int]:
    """The RAM's draw for one round: m distinct clients, i.i.d. across rounds, by rho."""
    rng = stream("ram-relay", seed, server_round)
    return sorted(int(i) for i in rng.choice(len(rho), size=m, replace=False, p=rho))


class RandomAccessClientManager(OracleClientManager):
    """Random Access Model (Fed-CVaR-Avg paper, Sec. 1-2, Fig. 1): a fixed categorical
    law rho over the K clients, independent across rounds, relaying ``m`` clients per
    round (m = 1 by default) whatever number the strategy asks for."""

    def __init__(
        self,
        rho: Sequence[float],
        seed: int,
        *,
        clients_per_round: int = 1,
        wait_timeout: float = 120.0,
    ) -> None:
        rho = np.asarray(rho, dtype=float)
        if rho.ndim != 1 or np.any(rho < 0) or abs(rho.sum() - 1.0) > 1e-6:
            raise ValueError(
                f"availability.params.rho: must be non-negative and sum to 1 "
                f"(sums to {rho.sum():.6g})"
            )
        if not 1 <= clients_per_round <= np.count_nonzero(rho):
            raise ValueError(
                f"availability.params.clients_per_round: {clients_per_round} must be in "
                f"1..{np.count_nonzero(rho)} (clients with rho > 0)"
            )
        super().__init__(len(rho), seed, wait_timeout=wait_timeout)
        self._rho = rho / rho.sum()
        self.clients_per_round = clients_per_round

    @property
    def rho(self) -> np.ndarray:
        """The hidden law (for plots and tests; strategies never read it)."""
        return self._rho.copy()

    def draw(self, server_round: int) -> list[int]:
        return ram_relay(self._rho, self.clients_per_round, self.seed, server_round)


# ------------------------------------------------- Markov chains (CA-Fed, Bernoulli)
def markov_lambda_min(pi: np.ndarray) -> np.ndarray:
    """Smallest lambda for which P(1->1) = lambda + (1 - lambda) pi and
    P(0->1) = (1 - lambda) pi are probabilities: -min(pi, 1 - pi) / max(pi, 1 - pi)."""
    pi = np.asarray(pi, dtype=float)
    return -np.minimum(pi, 1 - pi) / np.maximum(pi, 1 - pi)


def check_markov_law(
    pi: np.ndarray,
    lam: np.ndarray,
    *,
    pi_field: str = "availability.params.pi",
    lam_field: str = "availability.params.lam",
) -> None:
    """Raise ValueError, naming the field and entry, unless every chain is valid:
    pi in [0, 1] and lambda in [lambda_min(pi), 1) (lambda = 1 never switches)."""
    if pi.ndim != 1 or pi.shape != lam.shape:
        raise ValueError(f"{lam_field}: has {lam.size} entries, {pi_field} has {pi.size}")
    bad = np.flatnonzero((pi < 0) | (pi > 1))
    if bad.size:
        k = bad[0]
        raise ValueError(f"{pi_field}[{k}]: {pi[k]:g} is outside the allowed range [0, 1]")
    lo = markov_lambda_min(pi)
    bad = np.flatnonzero((lam < lo) | (lam >= 1))
    if bad.size:
        k = bad[0]
        raise ValueError(
            f"{lam_field}[{k}]: {lam[k]:g} is outside the allowed range [{lo[k]:.4g}, 1) "
            f"for pi = {pi[k]:g} (P(1->1) and P(0->1) must be probabilities; "
            "lambda = 1 would never switch)"
        )


def fedar_spread(num_clients: int, p_min: float) -> np.ndarray:
    """Bernoulli p_k "varying from p_min to 1" (FedAR Sec. 6.1, which gives no more
    detail): evenly spaced from 1 (client 0) down to p_min (the last client)."""
    return np.linspace(1.0, p_min, num_clients)


def markov_activation(pi: np.ndarray, lam: np.ndarray, state: np.ndarray | None) -> np.ndarray:
    """P(active next round | state) = lambda * state + (1 - lambda) pi, i.e.
    P(1->1) = lambda + (1 - lambda) pi and P(0->1) = (1 - lambda) pi (CA-Fed Sec. V-A,
    second eigenvalue lambda); the stationary pi when there is no previous state."""
    return pi if state is None else lam * state + (1 - lam) * pi


def ca_fed_markov_law(
    num_clients: int, g: float, nu: float, eps: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(pi, lambda) of the CA-Fed paper's clients (Sec. V-A a): the first half "more
    available" (pi = 1/2 + g), the second half "less available" (pi = 1/2 - g); each half
    splits into "correlated" clients (lambda = nu, first) and "weakly correlated" ones
    (lambda ~ N(0, eps^2), clipped to [lambda_min(pi), 1))."""
    pi = np.empty(num_clients)
    lam = np.empty(num_clients)
    for half, p in zip(np.array_split(np.arange(num_clients), 2), (0.5 + g, 0.5 - g)):
        correlated, weak = np.array_split(half, 2)
        pi[half] = p
        lam[correlated] = nu
        lam[weak] = eps * rng.standard_normal(weak.size)
    lam = np.clip(lam, markov_lambda_min(pi), np.nextafter(1.0, 0.0))
    return pi, lam


def ca_fed_cluster_law(num_clusters: int, g: float) -> tuple[np.ndarray, np.ndarray]:
    """(pi_c, lambda_c) of the CA-Fed spatial-correlation experiment (Sec. V-B e): the
    first half of the clusters "more available" (pi = 1/2 + g, lambda = 0), the others
    "less available, correlated" (pi = 1/2 - g, lambda_c = c / C); with C = 10, g = 0.4:
    pi = 0.9 for c = 0..4, pi = 0.1 and lambda = 0.5..0.9 for c = 5..9."""
    c = np.arange(num_clusters)
    more = c < (num_clusters + 1) // 2
    return np.where(more, 0.5 + g, 0.5 - g), np.where(more, 0.0, c / num_clusters)


def contiguous_clusters(num_clients: int, num_clusters: int) -> np.ndarray:
    """Cluster of each client: equal contiguous blocks of ids (client k -> k C // N)."""
    return np.arange(num_clients) * num_clusters // num_clients


def label_permutation(pi: np.ndarray, client_classes: Sequence[Sequence[int]]) -> np.ndarray:
    """Label-correlated availability: ``perm`` such that client k takes the generated
    parameters of client ``perm[k]``. Clients in ascending order of the mean id of the
    classes they hold receive the generated parameters in descending order of pi (ties
    keep id order): clients holding lower class ids are more available. Only who gets
    which (pi, lambda) changes, not their values."""
    mean_class = np.array([np.mean(c) for c in client_classes])
    perm = np.empty(len(pi), dtype=int)
    perm[np.argsort(mean_class, kind="stable")] = np.argsort(-np.asarray(pi), kind="stable")
    return perm


class MarkovClientManager(OracleClientManager):
    """Two-state Markov availability (CA-Fed Sec. III-D, V-A): chain j is active in round
    1 with probability pi_j (the stationary law), then moves with P(1->1) = lambda_j +
    (1 - lambda_j) pi_j and P(0->1) = (1 - lambda_j) pi_j; its lag-1 autocorrelation is
    lambda_j. Client k follows chain ``cluster_of[k]`` (default: its own chain; shared
    chains are CA-Fed V-B e's spatial correlation). Every active client is relayed.

    Round r's uniforms come from a generator seeded by (seed, r), so the state at round
    r is a pure function of (seed, r); states are simulated in round order once and
    cached as bits: O(chains) per new round, any access order."""

    def __init__(
        self,
        pi: Sequence[float],
        lam: Sequence[float],
        seed: int,
        *,
        cluster_of: Sequence[int] | None = None,
        wait_timeout: float = 120.0,
    ) -> None:
        pi, lam = np.asarray(pi, dtype=float), np.asarray(lam, dtype=float)
        check_markov_law(pi, lam)
        chains = np.arange(pi.size) if cluster_of is None else np.asarray(cluster_of)
        bad = np.flatnonzero((chains < 0) | (chains >= pi.size))
        if bad.size:
            raise ValueError(
                f"availability.params.cluster_of[{bad[0]}]: {chains[bad[0]]} is not a "
                f"cluster; allowed values: 0..{pi.size - 1}"
            )
        super().__init__(chains.size, seed, wait_timeout=wait_timeout)
        self._chain_pi, self._chain_lam, self._chain_of = pi, lam, chains
        self._bits: list[np.ndarray] = []  # packed chain states of rounds 1, 2, ...
        self._state: np.ndarray | None = None  # chain states of the last simulated round

    @property
    def pi(self) -> np.ndarray:
        """Each client's stationary availability pi_k (hidden from strategies unless a
        scenario runs them oracle-informed)."""
        return self._chain_pi[self._chain_of]

    @property
    def lam(self) -> np.ndarray:
        """Each client's correlation lambda_k (hidden, like ``pi``)."""
        return self._chain_lam[self._chain_of]

    def chain_states(self, server_round: int) -> np.ndarray:
        """Active flags of the chains in ``server_round`` (>= 1)."""
        if server_round < 1:
            raise ValueError(f"rounds start at 1, got {server_round}")
        n = self._chain_pi.size
        while len(self._bits) < server_round:
            u = stream("markov-step", self.seed, len(self._bits) + 1).random(n)
            self._state = u < markov_activation(self._chain_pi, self._chain_lam, self._state)
            self._bits.append(np.packbits(self._state))
        return np.unpackbits(self._bits[server_round - 1], count=n).astype(bool)

    def draw(self, server_round: int) -> list[int]:
        return np.flatnonzero(self.chain_states(server_round)[self._chain_of]).tolist()


class BernoulliClientManager(MarkovClientManager):
    """Independent Bernoulli availability (FedAR Sec. 6.1): client k is active in every
    round with probability p_k, independently; the Markov chain with lambda = 0."""

    def __init__(self, p: Sequence[float], seed: int, *, wait_timeout: float = 120.0) -> None:
        p = np.asarray(p, dtype=float)
        check_markov_law(p, np.zeros_like(p), pi_field="availability.params.p")
        super().__init__(p, np.zeros_like(p), seed, wait_timeout=wait_timeout)


# ------------------------------------------------------------------------- cyclic
def evenly_spread_phases(num_clients: int, period: int) -> np.ndarray:
    """Default phases: client k starts its window at round k P // N + 1."""
    return np.arange(num_clients) * period // num_clients


def cyclic_active(server_round: int, period: int, window: int, phase: np.ndarray) -> np.ndarray:
    """Client k is active in the rounds r with (r - 1 - phase_k) mod period < window:
    ``window`` consecutive rounds of every ``period``, starting at round phase_k + 1."""
    return (server_round - 1 - phase) % period < window


class CyclicClientManager(OracleClientManager):
    """Cyclic availability: client k is active ``window`` rounds of every ``period``,
    shifted by its phase (deterministic; the seed is unused). Long-run availability
    w / P; lag-1 autocorrelation 1 - P / (w (P - w)) when 0 < w < P."""

    def __init__(
        self,
        phase: Sequence[int],
        period: int,
        window: int,
        seed: int,
        *,
        wait_timeout: float = 120.0,
    ) -> None:
        phase = np.asarray(phase, dtype=int)
        if period < 1 or not 1 <= window <= period:
            raise ValueError(
                f"availability.params.window: {window} must be in 1..period "
                f"(availability.params.period = {period}, at least 1)"
            )
        bad = np.flatnonzero((phase < 0) | (phase >= period))
        if bad.size:
            raise ValueError(
                f"availability.params.phase[{bad[0]}]: {phase[bad[0]]} is outside 0..{period - 1}"
            )
        super().__init__(phase.size, seed, wait_timeout=wait_timeout)
        self.period, self.window, self._phase = period, window, phase

    @property
    def pi(self) -> np.ndarray:
        """Each client's long-run availability w / P."""
        return np.full(self.num_clients, self.window / self.period)

    def draw(self, server_round: int) -> list[int]:
        return np.flatnonzero(
            cyclic_active(server_round, self.period, self.window, self._phase)
        ).tolist()


# -------------------------------------------------------------------------- traces
def read_trace(path: Path, num_clients: int) -> np.ndarray:
    """A recorded availability trace as a rounds x clients bool matrix. ``.csv``: one
    line per round, one 0/1 column per client (the ``availability.csv`` every run
    writes); ``.json``: a list per round of the active partition ids. Errors name the
    file, the round and the client."""
    where = f"availability.params.path: {path}"
    if not path.is_file():
        raise ValueError(f"{where}: trace file not found")
    if path.suffix == ".csv":
        rows = [line.replace(" ", "").split(",") for line in path.read_text().splitlines()]
        rows = [r for r in rows if r != [""]]
        widths = sorted({len(r) for r in rows})
        if len(widths) > 1:
            first = next(i for i, r in enumerate(rows) if len(r) != len(rows[0]))
            raise ValueError(
                f"{where}: ragged rows: round 1 has {len(rows[0])} columns, round "
                f"{first + 1} has {len(rows[first])}"
            )
        if rows and widths[0] != num_clients:
            raise ValueError(
                f"{where}: has {widths[0]} columns (clients); data.num_clients is {num_clients}"
            )
        matrix = np.array(rows, dtype=str).reshape(len(rows), num_clients)
        bad = np.argwhere((matrix != "0") & (matrix != "1"))
        if bad.size:
            r, k = bad[0]
            raise ValueError(
                f"{where}: round {r + 1}, client {k}: {str(matrix[r, k])!r} is not 0 or 1"
            )
        matrix = matrix == "1"
    elif path.suffix == ".json":
        rounds = json.loads(path.read_text())
        if not isinstance(rounds, list) or not all(isinstance(r, list) for r in rounds):
            raise ValueError(f"{where}: expected a list (one per round) of lists of client ids")
        matrix = np.zeros((len(rounds), num_clients), dtype=bool)
        for r, ids in enumerate(rounds, 1):
            for k in ids:
                if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < num_clients:
                    raise ValueError(
                        f"{where}: round {r} lists client {k!r}: unknown id; allowed values: "
                        f"0..{num_clients - 1} (data.num_clients = {num_clients})"
                    )
                if matrix[r - 1, k]:
                    raise ValueError(f"{where}: round {r} lists client {k} twice")
                matrix[r - 1, k] = True
    else:
        raise ValueError(
            f"{where}: unknown trace format {path.suffix!r}; allowed: .csv (round x "
            "client 0/1 matrix), .json (active client ids per round)"
        )
    if not len(matrix):
        raise ValueError(f"{where}: the trace holds no rounds")
    return matrix


def write_trace(path: Path, matrix: np.ndarray) -> None:
    """Write a rounds x clients bool matrix in the format :func:`read_trace` reads."""
    if path.suffix == ".json":
        path.write_text(json.dumps([np.flatnonzero(row).tolist() for row in matrix]))
    else:
        np.savetxt(path, np.asarray(matrix, dtype=np.uint8), fmt="%d", delimiter=",")


class TraceClientManager(OracleClientManager):
    """Replays a recorded availability matrix (rounds x clients): round r relays the
    clients active in row r - 1. Past the last row it raises, or wraps around when
    ``wrap`` (the seed is unused)."""

    def __init__(
        self, matrix: np.ndarray, seed: int, *, wrap: bool = False, wait_timeout: float = 120.0
    ) -> None:
        matrix = np.asarray(matrix, dtype=bool)
        super().__init__(matrix.shape[1], seed, wait_timeout=wait_timeout)
        self._matrix, self.wrap = matrix, wrap
        self.num_rounds = len(matrix)

    @property
    def pi(self) -> np.ndarray:
        """Each client's active fraction over the trace."""
        return self._matrix.mean(axis=0)

    def draw(self, server_round: int) -> list[int]:
        if server_round > self.num_rounds and not self.wrap:
            raise AvailabilityError(
                f"round {server_round} is past the end of the trace ({self.num_rounds} "
                "rounds); set availability.params.past_end: wrap to replay it from the start"
            )
        return np.flatnonzero(self._matrix[(server_round - 1) % self.num_rounds]).tolist()


# ----------------------------------------------------------- physical availability
class ReportingProxy(ClientProxy):
    """A relayed client that tells its oracle (``on_failure(cid)``) when an instruction
    fails: an error reply, no reply within the round timeout, a lost connection."""

    def __init__(self, proxy: ClientProxy, on_failure: Callable[[str], None]) -> None:
        super().__init__(proxy.cid)
        self.proxy = proxy
        self.on_failure = on_failure

    def _call(self, method: str, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        try:
            return getattr(self.proxy, method)(ins, timeout, group_id)
        except Exception:
            self.on_failure(self.cid)
            raise

    def get_properties(self, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        return self._call("get_properties", ins, timeout, group_id)

    def get_parameters(self, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        return self._call("get_parameters", ins, timeout, group_id)

    def fit(self, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        return self._call("fit", ins, timeout, group_id)

    def evaluate(self, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        return self._call("evaluate", ins, timeout, group_id)

    def reconnect(self, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        return self._call("reconnect", ins, timeout, group_id)


def connected_sample(
    connected: Sequence[int], m: int | None, seed: int, server_round: int
) -> list[int]:
    """Round ``server_round``'s relayed ids: all ``connected`` ones, or ``m`` of them
    drawn uniformly without replacement by a generator seeded by (seed, round)."""
    ids = sorted(int(i) for i in connected)
    if m is None or len(ids) <= m:
        return ids
    rng = stream("connected-sample", seed, server_round)
    return sorted(int(i) for i in rng.choice(ids, size=m, replace=False))


class ConnectedClientManager(OracleClientManager):
    """Physical availability (Deployment Engine): nothing is emulated, whoever is
    connected answers. Round r relays every connected client that has not failed, or
    ``clients_per_round`` of them (:func:`connected_sample`). A SuperNode that stops is
    unregistered by Flower once its heartbeats stop (within 60 s in Flower 1.39); one
    whose instruction fails (error reply, or no reply within ``round_timeout`` s) is
    left out of the following rounds: for ``retry_after`` rounds if given (a slow but
    live client is asked again; a dead one is gone by then or fails again), else until
    it reconnects (a restarted SuperNode registers under a new node id). The first round
    waits, at most ``wait_timeout`` s, for ``min_clients`` connections (default: all);
    later rounds never wait for anybody. In the in-process engine every client is
    connected and never fails, so it relays all of them every round."""

    def __init__(
        self,
        num_clients: int,
        seed: int,
        *,
        clients_per_round: int | None = None,
        min_clients: int | None = None,
        round_timeout: float | None = 30.0,
        retry_after: int | None = None,
        wait_timeout: float = 120.0,
    ) -> None:
        super().__init__(num_clients, seed, wait_timeout=wait_timeout)
        self.clients_per_round = clients_per_round
        self.min_clients = num_clients if min_clients is None else min_clients
        self.round_timeout = round_timeout
        self.retry_after = retry_after
        self.failed: dict[str, int] = {}  # node (cid) -> the round its instruction failed

    @property
    def pi(self) -> np.ndarray:
        """The law it assumes before any device says otherwise: everyone available."""
        return np.ones(self.num_clients)

    def draw(self, server_round: int) -> list[int]:
        return connected_sample(
            self.connected_partitions(), self.clients_per_round, self.seed, server_round
        )

    def _excluded(self, cid: str) -> bool:
        """Whether node ``cid`` failed and is still left out in this round."""
        failed = self.failed.get(cid)
        if failed is None:
            return False
        if self.retry_after is not None and self.round > failed + self.retry_after:
            del self.failed[cid]  # asked again; a new failure excludes it again
            return False
        return True

    def sample(
        self,
        num_clients: int,
        min_num_clients: int | None = None,
        criterion: Criterion | None = None,
    ) -> list[ClientProxy]:
        """The connected clients of this round, each reporting its failures."""
        relayed = super().sample(num_clients, min_num_clients, criterion)
        return [ReportingProxy(proxy, self._mark_failed) for proxy in relayed]

    def _mark_failed(self, cid: str) -> None:
        with self._cv:
            self.failed.setdefault(cid, self.round)

    def _resolve_partitions(self) -> None:
        """Learn the partition ids of newly connected clients (no wait after round 1)."""
        if self.round == 1 and not self.wait_for(self.min_clients, int(self.wait_timeout)):
            raise AvailabilityError(
                f"only {self.num_available()} clients connected within {self.wait_timeout:.0f}"
                f" s; availability.params.min_clients is {self.min_clients}"
            )
        new = [c for c in self._unknown() if not self._excluded(c.cid)]
        for pid, proxy in self._ask_partitions(new, self.wait_timeout):
            if isinstance(pid, BaseException):
                self._mark_failed(proxy.cid)
            elif not 0 <= pid < self.num_clients:
                raise AvailabilityError(
                    f"client {proxy.cid} reports partition id {pid}: expected an id in "
                    f"0..{self.num_clients - 1}"
                )
            else:
                with self._cv:  # a reconnected node replaces its old proxy
                    self._by_partition[pid] = proxy

    def connected_partitions(self) -> list[int]:
        """Partition ids of the connected clients not left out after a failure."""
        with self._cv:
            return sorted(p for p, c in self._by_partition.items() if not self._excluded(c.cid))

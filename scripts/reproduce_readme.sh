#!/usr/bin/env bash
# Regenerates every result the README shows: runs the scenarios and the benchmark, then
# copies the generated reports and figures into docs/results/. About an hour on 2 cores
# (each scenario's description gives its scale). Complete runs are skipped on a rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${OUT:-runs/readme}
for s in fig2a_gaussian_3users fig2b_gaussian_4classes fig2c_gaussian_30users table1_scaled; do
  .venv/bin/fedram run "scenarios/$s.yaml" --out "$OUT"
  mkdir -p "docs/results/$s"
  cp "$OUT/$s/report.md" "$OUT/$s"/*.png "docs/results/$s/"
done
t1="$OUT/table1_scaled"
cp "$t1/alpha=0.1/seed0/accuracy.png" docs/results/table1_scaled/cvar_seed0_accuracy.png
cp "$t1/alpha=1.0/seed0/accuracy.png" docs/results/table1_scaled/fedavg_seed0_accuracy.png
cp "$t1/alpha=0.1/seed0/t.png" docs/results/table1_scaled/cvar_seed0_t.png
cp "$t1/alpha=0.1/seed0/relays.png" docs/results/table1_scaled/seed0_relays.png
.venv/bin/python bench/engine_overhead.py --rounds 3 --local-epochs 20 --repeats 1 --flwr \
  --out docs/results/bench
.venv/bin/python bench/engine_overhead.py --scenario scenarios/fig2a_gaussian_3users.yaml \
  --rounds 100 --local-epochs 1 --repeats 2 --flwr --out docs/results/bench_light
# CA-Fed (issue 3): Synthetic scenario (5 algorithms x 3 seeds, ~25 min on 2 busy cores),
# Fig. 4a estimator errors and the selection benchmark (pure numpy, seconds).
cs="$OUT/ca_fed_synthetic"
.venv/bin/fedram run scenarios/ca_fed_synthetic.yaml --out "$OUT"
mkdir -p docs/results/ca_fed_synthetic
cp "$cs/report.md" "$cs"/*.png docs/results/ca_fed_synthetic/
for f in inclusion group_weights estimator_errors accuracy; do
  cp "$cs/name=ca-fed/seed0/$f.png" "docs/results/ca_fed_synthetic/ca_fed_seed0_$f.png"
done
.venv/bin/python bench/ca_fed_estimators.py --obs 100 1000 10000 --seeds 10 \
  --out docs/results/ca_fed_estimators
.venv/bin/python bench/ca_fed_selection.py --clients 100 10000 100000 --repeats 20 \
  --out docs/results/ca_fed_bench
# FedAR (issue 4): Fashion-MNIST, 7 algorithms x 3 seeds. p_min=0.1 at 150 rounds (one
# process, ~1 h on 2 busy cores) -> docs/results/fedar; p_min in {0.1, 0.5} at 50 rounds
# (evaluated every 5; two processes in parallel) -> docs/results/fedar_50rounds.
fa=fedar_fashion_mnist
algos=(fedar mifa fedvarp fedavg-is fedavg-s scaffold fedau)
vs=()
for a in "${algos[@]}"; do vs+=(--variant "p_min=0.1_name=$a"); done
OMP_NUM_THREADS=1 .venv/bin/fedram run "scenarios/$fa.yaml" --out "$OUT/fedar150" \
  --set rounds=150 "${vs[@]}" >/dev/null
f150="$OUT/fedar150/$fa"
mkdir -p docs/results/fedar
cp "$f150/report.md" "$f150"/*.png docs/results/fedar/
pids=()
for p in 0.1 0.5; do
  vs=()
  for a in "${algos[@]}"; do vs+=(--variant "p_min=${p}_name=$a"); done
  OMP_NUM_THREADS=1 .venv/bin/fedram run "scenarios/$fa.yaml" --out "$OUT/fedar50" \
    --set rounds=50 --set eval_every=5 "${vs[@]}" >/dev/null &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
.venv/bin/fedram report "$OUT/fedar50/$fa" >/dev/null
mkdir -p docs/results/fedar_50rounds
cp "$OUT/fedar50/$fa/report.md" "$OUT/fedar50/$fa"/*.png docs/results/fedar_50rounds/
# FedAR Fig. 5 (N sweep) reduced to seed 0 and 50 rounds -> docs/results/fedar_num_clients.
OMP_NUM_THREADS=1 .venv/bin/fedram run scenarios/fedar_num_clients.yaml --out "$OUT/fedar_n50" \
  --set rounds=50 --seeds 0 >/dev/null
mkdir -p docs/results/fedar_num_clients
cp "$OUT/fedar_n50/fedar_num_clients/report.md" "$OUT/fedar_n50/fedar_num_clients"/*.png \
  docs/results/fedar_num_clients/
OMP_NUM_THREADS=1 .venv/bin/python bench/update_memory.py --clients 100 1000 \
  --models lenet5 logreg >docs/results/fedar/update_memory.jsonl

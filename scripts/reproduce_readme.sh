#!/usr/bin/env bash
# Regenerates every result of the results pages (docs/*.md, linked from the README): runs the
# scenarios and the benchmarks, then copies the generated reports and figures into docs/results/,
# which the pages link. Several hours on 2 cores (each scenario's description gives its scale).
# Complete runs are skipped on a rerun.
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
# CA-Fed: Synthetic scenario (5 algorithms + 2 CA-Fed variants x 3 seeds, which
# join one folder and report; 1-4 min a run on 2 busy cores), the kappa_bar^2 sweep and
# the spatial (clustered) scenario scaled to seed 0 (the sweep also to T=200), Fig. 4a
# estimator errors and the selection benchmark (pure numpy, seconds).
cs="$OUT/ca_fed_synthetic"
for s in ca_fed_synthetic ca_fed_synthetic_local_optimum ca_fed_synthetic_estimated \
  ca_fed_synthetic_server_lr; do
  .venv/bin/fedram run "scenarios/$s.yaml" --out "$OUT"
done
mkdir -p docs/results/ca_fed_synthetic
cp "$cs/report.md" "$cs"/*.png docs/results/ca_fed_synthetic/
for f in inclusion group_weights estimator_errors accuracy; do
  cp "$cs/name=ca-fed/seed0/$f.png" "docs/results/ca_fed_synthetic/ca_fed_seed0_$f.png"
done
.venv/bin/fedram run scenarios/ca_fed_kappa_sweep.yaml --out "$OUT" --set rounds=200 \
  --set eval_every=5 --seeds 0
.venv/bin/fedram run scenarios/ca_fed_spatial_synthetic.yaml --out "$OUT" --seeds 0
for s in ca_fed_synthetic_server_lr ca_fed_kappa_sweep ca_fed_spatial_synthetic; do
  mkdir -p "docs/results/$s"
  cp "$OUT/$s/report.md" "$OUT/$s"/*.png "docs/results/$s/"
done
cp "$OUT/ca_fed_spatial_synthetic/name=ca-fed/seed0/inclusion.png" \
  docs/results/ca_fed_spatial_synthetic/ca_fed_seed0_inclusion.png
.venv/bin/python bench/ca_fed_estimators.py --obs 100 1000 10000 --seeds 10 \
  --out docs/results/ca_fed_estimators
.venv/bin/python bench/ca_fed_selection.py --clients 100 10000 100000 --repeats 20 \
  --out docs/results/ca_fed_bench
# FedAR: Fashion-MNIST, 7 algorithms x 3 seeds. p_min=0.1 at 150 rounds (one
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
# FedAR Fig. 5 (N sweep) reduced to 50 rounds, seeds 0-2 (105 runs) -> docs/results/fedar_num_clients.
OMP_NUM_THREADS=1 .venv/bin/fedram run scenarios/fedar_num_clients.yaml --out "$OUT/fedar_n50" \
  --set rounds=50 --ray >/dev/null
mkdir -p docs/results/fedar_num_clients
cp "$OUT/fedar_n50/fedar_num_clients/report.md" "$OUT/fedar_n50/fedar_num_clients"/*.png \
  docs/results/fedar_num_clients/
OMP_NUM_THREADS=1 .venv/bin/python bench/update_memory.py --clients 100 1000 \
  --models lenet5 logreg >docs/results/fedar/update_memory.jsonl
# Deployment Engine: wall time per round in the three engines (Deployment with
# Flower's defaults, with the SuperExec poll lowered, and with TLS; ~25 min on 2 busy
# cores), then the SuperNode fault run (SuperNode 2 SIGKILLed after round 3; ~10 min).
OMP_NUM_THREADS=1 .venv/bin/python bench/engines.py --rounds 6 --out docs/results/engines
OMP_NUM_THREADS=1 .venv/bin/python bench/deployment_fault.py --partition 2 --after 3 \
  --out docs/results/engines

# RC-FL: Fashion-MNIST three clients, FedAvg / AFL / q-FFL / rFedFair x 3 seeds
# (120 rounds, ~15-50 min on the 2 shared cores); then Fed-CVaR-Avg's scaled Table 1 with
# the fairness metrics on, scaled further (400 rounds of H=2 local epochs, ~30 min).
rc=rcfl_fashion_mnist_3clients
OMP_NUM_THREADS=1 .venv/bin/fedram run "scenarios/$rc.yaml" --out "$OUT" >/dev/null
mkdir -p docs/results/rcfl
cp "$OUT/$rc/report.md" "$OUT/$rc"/*.png docs/results/rcfl/
OMP_NUM_THREADS=1 .venv/bin/fedram run scenarios/table1_scaled.yaml --out "$OUT/table1_fairness" \
  --set rounds=400 --set training.local_epochs=2 --set eval_every=50 \
  --set client_metrics=true --set 'hcvar_alpha=[0.1]' >/dev/null
mkdir -p docs/results/table1_fairness
cp "$OUT/table1_fairness/table1_scaled/report.md" "$OUT/table1_fairness/table1_scaled"/*.png \
  docs/results/table1_fairness/
# RC-FL checks of the eta/local-steps explanation (docs/rc-fl.md): alpha_i = 0.34, kappa = 5 and 1,
# and the kappa = 1 ablation of the four algorithms (~10 min together).
OMP_NUM_THREADS=1 .venv/bin/fedram run "scenarios/$rc.yaml" --out "$OUT/rcfl_alpha_p" \
  --set 'sweep={}' --set 'algorithm.alpha=[0.34]' >/dev/null
OMP_NUM_THREADS=1 .venv/bin/fedram run scenarios/rcfl_fashion_mnist_kappa1.yaml --out "$OUT" >/dev/null
OMP_NUM_THREADS=1 .venv/bin/fedram run scenarios/rcfl_fashion_mnist_kappa1.yaml \
  --out "$OUT/rcfl_alpha_p" --set 'sweep={}' --set 'algorithm.alpha=[0.34]' >/dev/null
mkdir -p docs/results/rcfl/{alpha034_kappa5,kappa1,alpha034_kappa1}
cp "$OUT/rcfl_alpha_p/$rc/report.md" docs/results/rcfl/alpha034_kappa5/
cp "$OUT/rcfl_fashion_mnist_kappa1/report.md" "$OUT/rcfl_fashion_mnist_kappa1/client_test_accuracy.png" \
  docs/results/rcfl/kappa1/
cp "$OUT/rcfl_alpha_p/rcfl_fashion_mnist_kappa1/report.md" docs/results/rcfl/alpha034_kappa1/
# FedAWE Table 2 on Fashion-MNIST, scaled down (docs/fedawe.md): 8 algorithms x 4
# dynamics x 3 seeds at 100 rounds, two runs at a time on a private local Ray (~60 min on
# the 2 shared cores).
fa=fedawe_table2_fashion_mnist
OMP_NUM_THREADS=1 .venv/bin/fedram run "scenarios/$fa.yaml" --ray --out "$OUT" >/dev/null
mkdir -p docs/results/fedawe_table2
cp "$OUT/$fa/report.md" docs/results/fedawe_table2/
# The scenario-scale runs: FedAR at the scenario's 300 rounds, both p_min (42 runs,
# 1-15 min each beside other work here) -> docs/results/fedar_300rounds; CA-Fed Synthetic's learning
# rates chosen per algorithm on tuning seeds 100-101 (150 runs), then the chosen rows (the
# sweep of ca_fed_synthetic_tuned.yaml, which `fedram report` printed for the grid) on
# seeds 0-9 (50 runs) -> docs/results/ca_fed_lr_grid, docs/results/ca_fed_tuned.
fa=fedar_fashion_mnist
OMP_NUM_THREADS=1 .venv/bin/fedram run "scenarios/$fa.yaml" --ray --out "$OUT/fedar300" >/dev/null
mkdir -p docs/results/fedar_300rounds
cp "$OUT/fedar300/$fa/report.md" "$OUT/fedar300/$fa"/{curves,train_loss}.png docs/results/fedar_300rounds/
for s in ca_fed_synthetic_lr_grid ca_fed_synthetic_tuned; do
  OMP_NUM_THREADS=1 .venv/bin/fedram run "scenarios/$s.yaml" --ray --out "$OUT" >/dev/null
done
mkdir -p docs/results/ca_fed_lr_grid docs/results/ca_fed_tuned
cp "$OUT/ca_fed_synthetic_lr_grid/report.md" docs/results/ca_fed_lr_grid/
cp "$OUT/ca_fed_synthetic_tuned/report.md" "$OUT/ca_fed_synthetic_tuned"/{curves,group_weights}.png \
  docs/results/ca_fed_tuned/
# Debiasing FedAvg's and Amplified SCAFFOLD's claims in their own availability settings, each
# against FedAvg, FedAU, MIFA and FedAWE, 3 seeds (4 and 7 min one by one on the 2 shared
# cores) -> docs/results/debiasing_fedavg_claim, docs/results/amplified_scaffold_claim.
for s in debiasing_fedavg_claim_fashion_mnist amplified_scaffold_claim_fashion_mnist; do
  .venv/bin/fedram run "scenarios/$s.yaml" --out "$OUT" >/dev/null
done
mkdir -p docs/results/debiasing_fedavg_claim docs/results/amplified_scaffold_claim
cp "$OUT/debiasing_fedavg_claim_fashion_mnist"/{report.md,curves.png} docs/results/debiasing_fedavg_claim/
as="$OUT/amplified_scaffold_claim_fashion_mnist"
cp "$as"/{report.md,curves.png} docs/results/amplified_scaffold_claim/
.venv/bin/python scripts/class_groups_table.py "$as" --round 200 --groups 5 \
  > docs/results/amplified_scaffold_claim/period_end_groups.md
# On the clock: FedAvg waiting for all, with a deadline, over-selecting, FedBuff and the
# memory methods fed late updates on one simulated clock, 3 seeds, cut at 6 simulated
# hours (27 runs, 44 min in 3-5 processes on the 2 shared cores) -> docs/results/time_results.
tr="$OUT/time_results_fashion_mnist"
.venv/bin/fedram run scenarios/time_results_fashion_mnist.yaml --out "$OUT" >/dev/null
.venv/bin/fedram report "$tr" --target-accuracy 0.8 --time-budget 6 >/dev/null
mkdir -p docs/results/time_results
cp "$tr"/{report.md,curves.png,curves_time.png} docs/results/time_results/
.venv/bin/python scripts/time_results_figure.py "$tr" --budget 6 \
  --out docs/results/time_results/accuracy_time_work.png
# FedAWE Table 2 with the paper's tuning protocol (App. J), scaled to this
# machine (docs/fedawe.md): logistic regression, a 3 x 3 corner of the 6 x 6 (eta_0, eta_g)
# grid (72 runs), tuning and final runs (96) of 100 rounds (~40 min, two at a time). On a
# GPU the whole protocol is `python scripts/fedawe_table2_tuned.py --device cuda`.
OMP_NUM_THREADS=1 .venv/bin/python scripts/fedawe_table2_tuned.py --model logreg \
  --lrs 0.1,0.05,0.01 --server-lrs 0.5,1,1.5 \
  --tune-rounds 100 --rounds 100 --eval-every 5 --ray --out "$OUT/fedawe_tuned" >/dev/null
mkdir -p docs/results/fedawe_table2_tuned
cp "$OUT/fedawe_tuned/fedawe_table2_tuned.md" docs/results/fedawe_table2_tuned/report.md

#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, as one command (CI has none; there they skip):
#   bash scripts/gpu_checks.sh [OUT]        (OUT default: runs/gpu_checks; $OUT if set)
# 1. the CUDA tests: batched rounds on the GPU equal the per-client loop there, and a GPU
#    run agrees with the CPU's;
# 2. bench/many_clients.py on the GPU: seconds per round in-process, batched and the plain
#    PyTorch loop, with the batched round's peak GPU memory (docs/performance.md);
# 3. the FedAWE Table 2 tuning protocol (scripts/fedawe_table2_tuned.py, the paper's CNN)
#    scaled down: two algorithms (the paper's 36-point grid each), 100 tuning and 200
#    final rounds, one seed; GPU_TABLE2_ARGS replaces those options for another scale.
# Each step's output is in OUT; a failed step does not stop the others; the exit status
# is the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-runs/gpu_checks}}"
mkdir -p "$out"
[ -x .venv/bin/python ] || bash scripts/setup.sh
py=.venv/bin/python
if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_checks: no GPU visible to torch (torch.cuda.is_available() is False)" >&2
    exit 2
fi
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
status=0
step() {  # step NAME COMMAND...: run, log to OUT/NAME.log, remember the first failure
    local name=$1
    shift
    echo "== $name: $*"
    "$@" > "$out/$name.log" 2>&1
    local rc=$?
    tail -n 5 "$out/$name.log"
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
}
step cuda-tests "$py" -m pytest -q -p no:cacheprovider -k "cuda or gpu" \
    tests/clients/test_batched.py tests/engines/test_batched_engines.py tests/engines/test_experiment.py
step bench env OMP_NUM_THREADS=1 "$py" bench/many_clients.py --device cuda --skip-flwr \
    --workloads fedar-logreg ca-fed-synthetic cnn-100 --rounds 6 --repeats 2 --out "$out/bench"
# shellcheck disable=SC2086  # GPU_TABLE2_ARGS is a list of options
step fedawe-table2 "$py" scripts/fedawe_table2_tuned.py --device cuda --batched auto \
    --out "$out/fedawe_table2_tuned" \
    ${GPU_TABLE2_ARGS:---algorithms fedawe,fedavg --tune-rounds 100 --rounds 200 --seeds 0}
exit "$status"

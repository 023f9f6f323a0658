import os

# One intra-op thread for torch, here and in every process the tests start (subprocesses,
# Flower's ServerApps and ClientApps, Ray's actors): the tests' models are tiny, and on
# two cores torch's default of a thread per core spins against the other workers and
# processes (the first tier's unit tests on 2 workers took 38 s and 75 CPU-s without
# it, 30 s and 57 CPU-s with it). Set before anything imports torch; a value already set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

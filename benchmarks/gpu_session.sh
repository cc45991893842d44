#!/usr/bin/env bash
# One GPU session's evidence: the GPU tests, examples/torch_lstm.py and `rnncc run`
# timings beside cuDNN. Writes into $OUT (default ./gpu-session-out); expects rnncc and
# PyCUDA importable. Usage: COMMIT=<sha> bash benchmarks/gpu_session.sh
# PARTS picks what runs (default "tests runs bench"), e.g. PARTS=bench to fit a time limit
# ("bench plans" adds graph_plans.py, short_and_odd.py and example_schedules.py under the
# same commit), and TESTS_K a part of the tests (a pytest -k expression; the summary file is
# then named gpu-tests-<date>-<TESTS_PART>.txt);
# "floors" adds the exchange and step-floor microbenchmarks of issue 14's design (the grid's,
# and between clusters when W_hh spans several).
# RNNCC_TEST_GPUS=N spreads the test workers over N GPUs (tests/conftest.py), for TESTS_N
# past what one GPU's share of CPU cores compiles quickly.
# PARTS=rest runs the GPU tests that the logs REST_LOGS (space-separated; default: the last
# tests part run on this machine, kept in /tmp/rnncc-gpu-tests-last.txt, and every rest part
# run after it, /tmp/rnncc-gpu-tests-rest-N.txt) did not report, as a further device call
# where a cold kernel cache stopped the ones before at their time limit
# (benchmarks/gpu_tests_rest.py), into gpu-tests-<date>-rest.txt, -rest2.txt, … Run it
# again until it reports no test left. On a machine that went cold, carry the logs and name
# them in REST_LOGS. benchmarks/join_gpu_logs.py then writes the evidence file from them all.
# SAVE_CUBINS=1 also writes the build cache (RNNCC_CACHE_DIR, default ~/.cache/rnncc) as
# $OUT/cubins.tar.xz.part-aa, -ab, … (15 MiB each: the device tool returns files of 16 MiB at
# most), so that a later device call can carry the kernels this one compiled instead of
# building them again: cat the parts into one file and untar it into the cache there.
set -uo pipefail
OUT=${OUT:-gpu-session-out}
mkdir -p "$OUT"
day=$(date -u +%F)
PARTS=${PARTS:-tests runs bench}
export RNNCC_COMMIT=${COMMIT:-unknown}
summary="$OUT/gpu-tests-$day${TESTS_PART:+-$TESTS_PART}.txt"
# The GPU tests with pytest's arguments "$@", -v and line-buffered: a run stopped by a time
# limit keeps what it reported (benchmarks/gpu_tests_rest.py lists the tests it did not reach).
gpu_pytest() {
    python3 -u -m pytest -m gpu -n ${TESTS_N:-8} -v -rA -p no:cacheprovider "$@" 2>&1 \
        | grep --line-buffered -v -i "benchmark"
}
if [[ " $PARTS " == *" tests "* ]]; then
rm -f /tmp/rnncc-gpu-tests-rest-*.txt  # rest parts of an earlier run are not this run's
{
    echo "rnncc GPU test run, $(date -u '+%F %T UTC'), commit ${COMMIT:-unknown}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/device: /'
    python3 -c "import torch, pycuda; print(f'torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, PyCUDA {pycuda.VERSION_TEXT}')"
    nvcc --version | tail -1
    # TESTS_K: a -k expression, to run the suite in parts that each fit a device call.
    echo "command: ${RNNCC_TEST_GPUS:+RNNCC_TEST_GPUS=$RNNCC_TEST_GPUS }python3 -m pytest -m gpu -n ${TESTS_N:-8} -v -rA tests/${TESTS_K:+ -k \"$TESTS_K\"}"
    gpu_pytest tests/ ${TESTS_K:+-k "$TESTS_K"}
} | tee "$summary" /tmp/rnncc-gpu-tests-last.txt  # the second copy for PARTS=rest, even if a limit stops this
fi
if [[ " $PARTS " == *" rest "* ]]; then
    if [[ -n "${REST_LOGS:-}" ]]; then
        read -r -a logs <<< "$REST_LOGS"
    else
        if [[ ! -e /tmp/rnncc-gpu-tests-last.txt ]]; then
            # a machine that went cold between the calls: its logs went with it, and every test
            # would look "not reported" or, with no log at all, none would run
            echo "gpu_session.sh: no tests part ran on this machine (it went cold?); carry its log and name it in REST_LOGS" >&2
            exit 2
        fi
        logs=(/tmp/rnncc-gpu-tests-last.txt /tmp/rnncc-gpu-tests-rest-*.txt)
        [[ -e "${logs[1]}" ]] || logs=("${logs[0]}")  # no rest part ran yet
    fi
    mapfile -t ids < <(python3 benchmarks/gpu_tests_rest.py "${logs[@]}")
    n=$(( ${#logs[@]} ))  # this part's number: the logs it reads
    suffix=rest$([[ $n -gt 1 ]] && echo "$n")
{
    echo "rnncc GPU test run (the tests ${logs[*]} did not report), $(date -u '+%F %T UTC'), commit ${COMMIT:-unknown}"
    echo "command: ${RNNCC_TEST_GPUS:+RNNCC_TEST_GPUS=$RNNCC_TEST_GPUS }python3 -m pytest -m gpu -n ${TESTS_N:-8} -v -rA IDS  (IDS: benchmarks/gpu_tests_rest.py LOGS, ${#ids[@]} tests)"
    (( ${#ids[@]} )) && gpu_pytest "${ids[@]}"
} | tee "$OUT/gpu-tests-$day-$suffix.txt" "/tmp/rnncc-gpu-tests-rest-$n.txt"
fi
if [[ " $PARTS " == *" runs "* ]]; then
python3 examples/torch_lstm.py 2>&1 | tail -8 | tee -a "$OUT/runs-$day.txt"

for case in "examples/lstm_1024.yaml 64" "examples/lstm_1024.yaml 8" "examples/gnmt_encoder.yaml 64" \
            "examples/gru_residual.yaml 8"; do
    set -- $case
    name=$(basename "$1" .yaml)-b$2
    python3 -m rnncc.cli run "$1" --batch "$2" --seq-len 256 --json "$OUT/run-$name-$day.json" 2>&1 \
        | tee -a "$OUT/runs-$day.txt"
done
fi
if [[ " $PARTS " == *" floors "* ]]; then
gpu=$(cd benchmarks && python3 -c "from result_files import gpu_tag; print(gpu_tag())")
python3 benchmarks/grid_exchange.py 2>&1 | tee "$OUT/grid-exchange-$gpu-$day.txt"
python3 benchmarks/step_floor.py 2>&1 | tee "$OUT/step-floor-$gpu-$day.txt"
python3 benchmarks/cross_cluster_exchange.py 2>&1 | tee "$OUT/cross-cluster-exchange-$gpu-$day.txt"
fi
if [[ " $PARTS " == *" bench "* ]]; then
python3 -m rnncc.cli bench -o "$OUT" ${BENCH_ARGS:-} 2>&1 | tee -a "$OUT/runs-$day.txt"
fi
# "plans": the bench's companions, under the same RNNCC_COMMIT (run outside this script, they
# read `git rev-parse`, and the device's copy of .git can be older than the tree it runs).
if [[ " $PARTS " == *" plans "* ]]; then
python3 benchmarks/graph_plans.py "$OUT" 2>&1 | tail -3 | tee -a "$OUT/runs-$day.txt"
python3 benchmarks/short_and_odd.py "$OUT" 2>&1 | tail -3 | tee -a "$OUT/runs-$day.txt"
python3 benchmarks/example_schedules.py "$OUT" 2>&1 | grep -v -i warn | tee "$OUT/example-schedules-$day.log"
fi
cache=${RNNCC_CACHE_DIR:-$HOME/.cache/rnncc}
if [[ -n "${SAVE_CUBINS:-}" && -d "$cache" ]]; then
    tar -cf - -C "$cache" --exclude='*.lock' . | xz -T0 -6 | split -b 15M - "$OUT/cubins.tar.xz.part-"
fi
# The device tool brings back 8 files of $OUT at most: say which would be left out.
files=$(find "$OUT" -maxdepth 2 -type f | wc -l)
if (( files > 8 )); then
    echo "gpu_session.sh: $OUT holds $files files, past the 8 a device call returns; bundle or pick:" >&2
    find "$OUT" -maxdepth 2 -type f >&2
fi

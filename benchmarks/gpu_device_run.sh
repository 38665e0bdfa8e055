#!/usr/bin/env bash
# Issue 24's GPU checks in one go, on a machine with a CUDA GPU and this checkout (python3 with the
# emulator's dependencies; PYTHONPATH may point at them). Each step is time-limited and logged to
# $OUT/<step>.log, its tail printed; a failed step does not stop the next.
#
#   OUT=gpu-out bash benchmarks/gpu_device_run.sh [steps...]
#
# steps (default: all but probe and papers): info tests quickstart fast bench memory probe papers
#
# probe: the papers sweep for a few rounds in each configuration of benchmarks/gpu_sweep_probe.py
# (PROBE_ARGS="--configs ..."); the fastest is written to $OUT/best.txt. Not needed for papers: on the
# H100 one run at a time was the fastest (docs/gpu.md, "Many runs on one GPU").
#
# papers: FAST's Table 2 Fashion-MNIST cells at alpha = 0.1 (uniform and Beta participation x FedAvg and
# FAST q = 0.5) at paper scale (1000 rounds) x 3 seeds, one run after another on 4 runners x 0.25 (or in
# PAPER_CONFIG), seed 0 of every cell first, skipping the runs results/gpu/ already holds finished, until
# PAPER_LIMIT seconds have passed (about 170 s a run on an H100). Every run's metrics.csv, summary.json and
# scenario.yaml (an unfinished run's too: how far it got) come back in $OUT/papers.tar.gz: unpack it into
# results/gpu/<date>-<gpu>/ and commit; `emulator report results/gpu/*/*/` rebuilds the tables.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
steps=${*:-info tests quickstart fast bench memory}
PAPER_ROUNDS=${PAPER_ROUNDS:-1000} PAPER_CONFIG=${PAPER_CONFIG:-one} BENCH_ARGS=${BENCH_ARGS:-}

step() {  # step LIMIT_S NAME COMMAND...
    local limit=$1 name=$2
    shift 2
    echo "=== $name (limit ${limit} s)"
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n "${TAIL:-30}" "$OUT/$name.log" | grep -v "logging.cc\|SIGTERM received\|PC: @\|^    @ "
    echo "=== $name: exit $rc after $((SECONDS - t0)) s"
}

summary() {  # the summary.json of the newest run under $1
    local run
    run=$(ls -dt "$1"/*/ 2>/dev/null | head -1)
    [ -n "$run" ] && python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print({k: s.get(k) for k in ('status','rounds_completed','runners','runner_devices','runner_gpu_peak_reserved_mib','runner_gpu_reserved_mib','final_test_acc','wall_time_s','error')})" "$run/summary.json"
}

for s in $steps; do
    case $s in
    info)
        step 60 info bash -c 'nvidia-smi; python3 -c "import torch, ray, numpy; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name(0), \"bf16\", torch.cuda.is_bf16_supported(), \"ray\", ray.__version__, \"numpy\", numpy.__version__)"; nproc; free -g' ;;
    tests)
        step 300 tests python3 -m pytest -q -p no:cacheprovider -rs --durations=10 -s tests/test_gpu.py ;;
    quickstart)
        step 150 quickstart python3 -m emulator run scenarios/quickstart.yaml --set runtime.num_gpus=0.25 \
            --set output.dir="$OUT/runs-quickstart"
        summary "$OUT/runs-quickstart" ;;
    fast)
        step 200 fast python3 -m emulator run scenarios/papers/fast_fmnist.yaml --set rounds=${FAST_ROUNDS:-50} \
            --set runtime.num_gpus=0.25 --set runtime.vectorise=true --set runtime.torch_threads=4 \
            --set output.dir="$OUT/runs-fast"
        summary "$OUT/runs-fast" ;;
    bench)
        TAIL=45 step ${BENCH_LIMIT:-400} bench python3 benchmarks/gpu.py --json "$OUT/bench.json" $BENCH_ARGS ;;
    memory)
        TAIL=12 step 200 memory python3 benchmarks/gpu.py --shares 0.25 --workloads fast_cnn --precisions fp32 \
            --rounds 3 --memory-rounds ${MEMORY_ROUNDS:-100} ;;
    probe)
        TAIL=12 step ${PROBE_LIMIT:-330} probe python3 benchmarks/gpu_sweep_probe.py --rounds ${PROBE_ROUNDS:-10} \
            --limit ${PROBE_CONFIG_LIMIT:-80} --best "$OUT/best.txt" ${PROBE_ARGS:-} ;;
    papers)
        step ${PAPER_LIMIT:-480} papers python3 benchmarks/gpu_sweep_probe.py --papers "$OUT/runs-papers" \
            --config "$PAPER_CONFIG" --rounds "$PAPER_ROUNDS" --limit $((${PAPER_LIMIT:-480} - 5)) --done results/gpu
        python3 - "$OUT/runs-papers" "$OUT/papers.tar.gz" <<'PY'
import csv, json, sys, tarfile
from pathlib import Path
root, done = Path(sys.argv[1]), 0
with tarfile.open(sys.argv[2], "w:gz") as tar:  # unfinished runs too: how far they got, and how fast
    for metrics in sorted(root.glob("*/metrics.csv")):
        run = metrics.parent
        rows = list(csv.DictReader(metrics.open()))
        summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
        status = summary.get("status", "unfinished")
        last = rows[-1] if rows else {}
        print(f"{run.name}: {status}, {len(rows)} rows, round {last.get('round')}, "
              f"wall {last.get('wall_time_s', last.get('wall_s'))}, test_acc {summary.get('final_test_acc')}")
        done += status == "completed"
        for name in ("metrics.csv", "summary.json", "scenario.yaml"):
            if (run / name).exists():
                tar.add(run / name, arcname=f"{run.name}/{name}")
print(f"{done} finished runs in {sys.argv[2]}")
PY
        ;;
    esac
done
rm -rf "$OUT"/runs-*  # $OUT brings back few files: the logs and the benchmark's rows

#!/usr/bin/env bash
# Issue 24's GPU checks in one go, on a machine with a CUDA GPU and this checkout (python3 with the
# emulator's dependencies; PYTHONPATH may point at them). Each step is time-limited and logged to
# $OUT/<step>.log, its tail printed; a failed step does not stop the next.
#
#   OUT=gpu-out bash benchmarks/gpu_device_run.sh [steps...]
#
# steps (default: all but probe, papers and stepprofile): info tests quickstart fast bench memory probe papers
# stepprofile
#
# stepprofile: what one local step of FAST's CNN costs (benchmarks/gpu_step_profile.py): the plain step eager,
# with fused Adam and as a CUDA graph, and an in-process emulator run's CUDA API calls a step; about 60 s.
#
# probe: the papers sweep for a few rounds in each configuration of benchmarks/gpu_sweep_probe.py
# (PROBE_ARGS="--configs ..."); the fastest is written to $OUT/best.txt. Not needed for papers: on the
# H100 one run at a time was the fastest (docs/gpu.md, "Many runs on one GPU").
#
# papers: the paper-scale runs (benchmarks/gpu_papers.py): FAST's Table 2 Fashion-MNIST cells at 1000 rounds
# x 3 seeds beside the plain reference loop, PAPER_PARALLEL (12) processes at once on the card under CUDA
# MPS, in order of need, skipping the runs results/gpu/ and results/gpu-reference/ already hold finished,
# until PAPER_LIMIT seconds have passed. Every run's metrics.csv, summary.json and scenario.yaml (an
# unfinished run's too: how far it got), jobs.csv and nvidia-smi.csv come back in $OUT/papers.tar.gz:
# `python benchmarks/gpu_papers_file.py $OUT/papers.tar.gz <date>-<gpu>` files them under results/; then
# `emulator report results/gpu/*/*/` rebuilds the tables.
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
steps=${*:-info tests quickstart fast bench memory}
BENCH_ARGS=${BENCH_ARGS:-}

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
    stepprofile)
        TAIL=70 step 240 stepprofile python3 benchmarks/gpu_step_profile.py ;;
    papers)
        step $((${PAPER_LIMIT:-550} + 30)) papers python3 benchmarks/gpu_papers.py --out "$OUT/papers" \
            --limit ${PAPER_LIMIT:-550} --parallel ${PAPER_PARALLEL:-12} --done results/gpu --done results/gpu-reference ${PAPER_ARGS:-}
        python3 - "$OUT/papers" "$OUT/papers.tar.gz" <<'PY'
import csv, json, sys, tarfile
from pathlib import Path
root, done = Path(sys.argv[1]), 0
with tarfile.open(sys.argv[2], "w:gz") as tar:  # unfinished runs too: how far they got, and how fast
    for run in sorted(p for p in (root / "runs").glob("*/") if p.is_dir()):
        summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
        status = summary.get("status", "unfinished")
        rows = list(csv.DictReader((run / "metrics.csv").open())) if (run / "metrics.csv").exists() else []
        print(f"{run.name}: {status}, round {rows[-1]['round'] if rows else 0}, wall {summary.get('wall_time_s')}")
        done += status == "completed"
        for name in ("metrics.csv", "summary.json", "scenario.yaml"):
            if (run / name).exists():
                tar.add(run / name, arcname=f"runs/{run.name}/{name}")
    for name in ("jobs.csv", "nvidia-smi.csv"):
        if (root / name).exists():
            tar.add(root / name, arcname=name)
    for log in sorted((root / "logs").glob("*.log")):  # the last lines of each run's own output
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) + "\n"
        info = tarfile.TarInfo(f"logs/{log.name}")
        info.size = len(tail.encode())
        import io
        tar.addfile(info, io.BytesIO(tail.encode()))
print(f"{done} finished runs in {sys.argv[2]}")
PY
        rm -rf "$OUT/papers"  # all of it is in papers.tar.gz; $OUT brings back few files
        ;;
    esac
done
rm -rf "$OUT"/runs-*  # $OUT brings back few files: the logs and the benchmark's rows

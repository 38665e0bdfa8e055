"""File what `gpu_device_run.sh papers` brought back: emulator runs under results/gpu/<session>/, the plain
loop's under results/gpu-reference/<session>/ (a run stopped before its last round under <session>-unfinished/
instead: how far it got, and how fast), the device session's jobs.csv and nvidia-smi.csv in results/gpu/<session>/.

    python benchmarks/gpu_papers_file.py gpu-out/papers.tar.gz 2026-11-27-h200
"""
from __future__ import annotations

import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path


def main(archive: str, session: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        unpacked = Path(tmp)
        filed = {"gpu": 0, "gpu-reference": 0}
        for run in sorted((unpacked / "runs").glob("*/")):
            kind = "gpu-reference" if run.name.startswith("reference-") else "gpu"
            summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
            folder = session if summary.get("status") == "completed" else f"{session}-unfinished"
            target = Path("results") / kind / folder / run.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(run, target)
            filed[kind] += 1
        (Path("results") / "gpu" / session).mkdir(parents=True, exist_ok=True)
        for name in ("jobs.csv", "nvidia-smi.csv"):
            if (unpacked / name).exists():
                shutil.copy(unpacked / name, Path("results") / "gpu" / session / name)
    print(f"filed {filed['gpu']} emulator runs under results/gpu/ and {filed['gpu-reference']} plain-loop runs "
          f"under results/gpu-reference/ ({session}, or {session}-unfinished for runs stopped early)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))

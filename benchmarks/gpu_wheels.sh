#!/usr/bin/env bash
# Packs what a bare GPU machine lacks to run the emulator into .whl/ (git-ignored): the wheels of ray,
# simpy, pydantic and jsonschema for its Python (3.12; torch, numpy, pandas and the rest are there), ray
# stripped of what a run never loads (its Java jars, the dashboard's web UI, rllib) and packed as tar.xz,
# and the Fashion-MNIST files. About 57 MiB; with the checkout (about 10 MiB) that is over the 64 MiB a
# device call carries, so a call that runs in process only (`gpu_device_run.sh papers`) takes
# `IN_PROCESS=1`: ray without its cluster binaries (gcs_server, raylet) and its data, serve, tune and train
# libraries, which `import ray` never loads; 45 MiB. numba is left out: without it the shared links' event loop
# (system/one_bottleneck.py) runs as plain Python. Needs the package registry (pip download) and
# /usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist).
#
#   bash benchmarks/gpu_wheels.sh            # (or IN_PROCESS=1 bash ...) then, on the GPU machine, in the checkout:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   tar -xJf .whl/ray-site.tar.xz -C /tmp/site
#   PYTHONPATH=/tmp/site EMULATOR_DATA=$PWD/.whl OUT=gpu-out bash benchmarks/gpu_device_run.sh
set -eu
PY=${PY:-3.12}
cd "$(dirname "$0")/.."
grep -qx "/.whl/" "$(git rev-parse --git-dir)/info/exclude" 2>/dev/null || echo "/.whl/" >>"$(git rev-parse --git-dir)/info/exclude"
rm -rf .whl && mkdir -p .whl/fashion_mnist
tmp=$(mktemp -d)
versions=$(.venv/bin/pip list --format=freeze 2>/dev/null | grep -iE "^(ray|simpy|pydantic|pydantic.core|annotated.types|typing.inspection|typing.extensions|jsonschema|jsonschema.specifications|referencing|rpds.py)==")
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$tmp" $versions
mv "$tmp"/*.whl .whl/
python3 - .whl <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "ray-*.whl"))[0]
drop = ("ray/jars/", "ray/dashboard/client/build/", "ray/rllib/", "ray/llm/")
if os.environ.get("IN_PROCESS") == "1":  # runs without a Ray cluster: `import ray` only
    drop += ("ray/core/src/ray/gcs/gcs_server", "ray/core/src/ray/raylet/raylet", "ray/data/", "ray/serve/",
             "ray/tune/", "ray/train/")
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if not info.filename.startswith(drop):
            z.extract(info, os.path.join(sys.argv[1], "ray-site"))
            mode = info.external_attr >> 16
            if mode:
                os.chmod(os.path.join(sys.argv[1], "ray-site", info.filename), mode)
os.remove(wheel)
PY
tar -C .whl/ray-site -cf - . | xz -9 -T0 >.whl/ray-site.tar.xz
rm -rf .whl/ray-site "$tmp"
cp /usr/share/datasets/fashion-mnist/*.gz .whl/fashion_mnist/
du -sh .whl

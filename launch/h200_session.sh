#!/usr/bin/env bash
# One GPU session for the kernels: compiled-Triton correctness (tests/kernels on CUDA) and the benchmark.
#
#   bash launch/h200_session.sh OUT_DIR
#
# Run from the repository root on a CUDA machine with torch and triton. Wheels under .whl/ (liger-kernel,
# cut-cross-entropy) are installed into /tmp/site first; dnmopd.kernels is laid out from the checkout under
# /tmp/pkg (no native build needed). Stages are independent and time-boxed; everything lands in OUT_DIR:
# session.log, and bench_kernels.{json,md} under OUT_DIR/{main,peers,sizes}.
set -u
OUT=${1:?usage: h200_session.sh OUT_DIR}
mkdir -p "$OUT"
LOG="$OUT/session.log"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
rm -rf /tmp/pkg && mkdir -p /tmp/pkg && cp -r dnmopd /tmp/pkg/
export PYTHONPATH=/tmp/pkg:$PYTHONPATH
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv; \
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } >>"$LOG" 2>&1

echo "== tests/kernels on CUDA" | tee -a "$LOG"
timeout 70 python3 -P -m pytest tests/kernels -q -p no:cacheprovider --timeout 60 \
  --ignore=tests/kernels/test_bench_harness.py --ignore=tests/kernels/test_kernels_tp.py >>"$LOG" 2>&1
echo "pytest exit $?" | tee -a "$LOG"; tail -4 "$LOG"

bench() {  # name, time budget (s), hard timeout (s), then bench_kernels.py arguments
  local name=$1 budget=$2 hard=$3; shift 3
  echo "== bench $name" | tee -a "$LOG"
  timeout "$hard" python3 launch/bench_kernels.py --device cuda --time-budget "$budget" --out "$OUT/$name" "$@" >>"$LOG" 2>&1
  echo "bench $name exit $?" | tee -a "$LOG"
}
NINE=qwen3.5-9b-tp1,qwen3.5-9b-tp8
bench main 45 90 --shapes $NINE --repeats 5 --impls floor,dnmopd,floor_chunked,torch,liger
bench sizes 35 60 --shapes qwen3.5-4b-tp1,qwen3.5-4b-tp8,qwen3.5-2b-tp1,qwen3.5-2b-tp8 --repeats 3 \
  --impls floor,dnmopd,torch,liger
bench peers 55 100 --shapes $NINE --repeats 3 --impls floor,dnmopd:logits_dtype=float32,cce,torch_compile

for name in main sizes peers; do
  [ -f "$OUT/$name/bench_kernels.md" ] && tail -n +4 "$OUT/$name/bench_kernels.md"
done

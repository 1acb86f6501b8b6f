#!/bin/bash
# `make demo-servers`: a cluster run's server path, rehearsed on this machine with the CPU demo's models and
# real vLLM CPU servers, by the commands a cluster job runs (docs/walkthrough.md):
#
#   1. the demo's models (python -m dnmopd.examples.demo_models runs/demo-models)
#   2. launch/slurm/dnmopd.sbatch --local: the server overlay from configs/demo_servers.servers.yaml, the whole
#      config checked, the rollout server and three teacher servers started (launch/start_servers.py), a few
#      updates of DN-MOPD with rollout and teachers over HTTP and the weights sent to the rollout server after
#      each, the release written, the servers stopped
#   3. the release on a vLLM server of its own (launch/start_servers.py), evaluated through it by
#      launch/evaluate.py run on the evaluation samples shipped with dnmopd
#
# Everything goes to runs/demo-servers/, which a new rehearsal replaces. Environment:
#   VLLM_PYTHON        the interpreter of the vLLM environment (`make vllm-env`; required)
#   PYTHON, TORCHRUN   the project's Python and torchrun (default: python3, torchrun)
#   DEMO_SERVERS_PORT  first of the six local ports it uses (default 18200: servers 18200-18204, rendezvous 18205)

set -euo pipefail

say() { echo "demo-servers: $*"; }
: "${VLLM_PYTHON:?set VLLM_PYTHON to the python of the vLLM environment (make vllm-env builds it)}"
[[ -x $VLLM_PYTHON ]] || { say "no vLLM interpreter at $VLLM_PYTHON (make vllm-env builds it)" >&2; exit 2; }
export PYTHON=${PYTHON:-python3} TORCHRUN=${TORCHRUN:-torchrun}
port=${DEMO_SERVERS_PORT:-18200}
run_dir=runs/demo-servers eval_port=$((port + 4))
started=$SECONDS

"$PYTHON" -m dnmopd.examples.demo_models runs/demo-models >/dev/null
rm -rf "$run_dir"

servers_set=()
for i in 0 1 2 3; do
  servers_set+=(--servers-set "servers.$i.python=$VLLM_PYTHON" --servers-set "servers.$i.port=$((port + i))")
done
RDZV_PORT=$((port + 5)) OMP_NUM_THREADS=1 bash launch/slurm/dnmopd.sbatch --local --gpus-per-node 1 \
  --job-dir "$run_dir/job" --servers configs/demo_servers.servers.yaml "${servers_set[@]}" \
  -- --config configs/demo_servers.yaml
say "trained in $((SECONDS - started)) s; evaluating the release through a vLLM server"

"$PYTHON" launch/evaluate.py prepare --samples --data-dir "$run_dir/eval_samples" >/dev/null
map=$run_dir/eval-servers.json
"$PYTHON" launch/start_servers.py --config configs/demo_servers.eval.servers.yaml --set "map_path=$map" \
  --set "servers.0.python=$VLLM_PYTHON" --set "servers.0.port=$eval_port" >"$run_dir/eval-servers.log" 2>&1 &
server=$!
# shellcheck disable=SC2064  # the pid is known now
trap "kill -TERM $server 2>/dev/null || true; wait $server 2>/dev/null || true" EXIT
until [[ -f $map ]]; do
  kill -0 "$server" 2>/dev/null || { say "the release's server did not start:" >&2; tail -n 30 "$run_dir/eval-servers.log" >&2
                                     exit 1; }
  sleep 2
done
"$PYTHON" launch/evaluate.py run --model "$run_dir/release" --config configs/demo_servers.eval.yaml \
  --set "engine.pool.urls=[http://127.0.0.1:$eval_port]" --data-dir "$run_dir/eval_samples" \
  --output-dir "$run_dir/eval" --suites ifbench,aime25,lcb_v5 --limit 2 --n 2 --max-tokens 64 --no-progress

say "done in $((SECONDS - started)) s: release $run_dir/release, plots $run_dir/plots, evaluation $run_dir/eval, \
server logs $run_dir/job/server_logs"

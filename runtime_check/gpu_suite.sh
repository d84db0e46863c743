#!/usr/bin/env bash
# dplint verify's GPU suite, for a CUDA machine (a few minutes on one GPU):
#   1. the `gpu`-marked tests (checks needing two GPUs skip with that reason);
#   2. `dplint verify` on every runtime fixture, real GPUs and nccl;
#   3. late_cuda_visible_devices.py asked to hide the GPU, too late;
#   4. the tutorial-shaped DDP script (fixtures/verify-tutorial) on nccl, no remap: exit 0.
# Usage: runtime_check/gpu_suite.sh [PYTHON]   (default: .venv/bin/python, else python3)
# Exit status: 1 when a test failed or a verify run could not do its job.
set -u
cd "$(dirname "$0")/.."
python=${1:-}
if [ -z "$python" ]; then
  if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
start=$(date +%s)
"$python" -c 'import torch; n = torch.cuda.device_count(); print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {n} GPU(s):", [torch.cuda.get_device_name(i) for i in range(n)])'
status=0
"$python" -m pytest -q -p no:cacheprovider -rs -m gpu tests/runtime || status=1
for script in fixtures/runtime/*.py; do
  case "$script" in */hang.py) continue ;; esac  # the timeout and signal tests' fixture: it never ends
  echo "== dplint verify $script"
  "$python" -m dplint.runtime_check -q "$script"
  [ $? -eq 2 ] && status=1  # 1 is a fix-failed or not-reached verdict, shown in the report
done
echo "== dplint verify fixtures/runtime/late_cuda_visible_devices.py -- --gpus -1"
"$python" -m dplint.runtime_check -q fixtures/runtime/late_cuda_visible_devices.py -- --gpus -1 || status=1
echo "== dplint verify fixtures/verify-tutorial/train.py -- 50 10"
"$python" -m dplint.runtime_check -q fixtures/verify-tutorial/train.py -- 50 10 || status=1  # runs in its folder
echo "GPU suite: $(( $(date +%s) - start )) s, exit status $status"
exit $status

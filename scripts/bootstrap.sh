#!/usr/bin/env bash
# Install dflash-eval into ./.venv (created if missing). Usage: scripts/bootstrap.sh [test]
#
# torch: the venv sees the system's site-packages, so a machine that already has torch (a GPU box with
# its own CUDA build) keeps it untouched. Only when no torch is importable do we install the CPU wheel
# pinned for this project's CPU machines (torch==2.13.0, which pip finds locally there) instead of
# letting pip pull a multi-GB CUDA build. triton / flash-linear-attention are never installed here: on a
# CPU machine an importable triton makes hybrid targets crash (GPU users add the `fla` extra).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv --system-site-packages .venv
fi
py=.venv/bin/python
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  "$py" -m pip install --quiet "torch==2.13.0"
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
"$py" -m pip install --quiet -e "$spec"
"$py" -c "import torch, transformers; print(f'dflash-eval installed: torch {torch.__version__}, transformers {transformers.__version__}')"

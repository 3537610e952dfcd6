#!/usr/bin/env bash
# One prepared GPU check for a CUDA machine that reaches no package index (see benchmarks/README.md).
# Installs flash-linear-attention from the wheels beside this script, then runs gpu_check.py.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
"$python" -m pip install --quiet --no-index --no-deps "$here"/wheels/*.whl
"$python" -c "import torch, transformers, fla; print('torch', torch.__version__, 'transformers', transformers.__version__, 'fla', fla.__version__, 'cuda', torch.cuda.is_available())"
cd "$here/.."
exec "$python" benchmarks/gpu_check.py

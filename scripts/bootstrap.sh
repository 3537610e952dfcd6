#!/usr/bin/env bash
# Install dflash-eval into ./.venv (created if missing). Usage: scripts/bootstrap.sh [test]
#
# torch: the venv sees the system's site-packages, so a machine that already has torch (a GPU box with
# its own CUDA build) keeps it untouched. Only when no torch is importable do we install the CPU wheel
# pinned for this project's CPU machines (torch==2.13.0, which pip finds locally there) instead of
# letting pip pull a multi-GB CUDA build. triton / flash-linear-attention are never installed here: on a
# CPU machine an importable triton makes hybrid targets crash (GPU users add the `fla` extra).
#
# `test` also installs the reference implementations that tests/test_conformance.py runs: z-lab's
# dflash==0.1.0 and speculators==0.9.0, and SpecForge 0.2.0 (its offline reader, pure Python, is the oracle
# of tests/test_trained_taps.py). The first two pin other torch/transformers versions (dflash's `local` extra
# torch==2.13.0 / transformers==5.15.0; speculators transformers<=5.19, torchvision, torchaudio, ...), so
# they are installed with --no-deps; the modules their DFlash code imports come from the `conformance`
# extra (pyproject.toml). The torch and transformers versions must come out unchanged, triton absent.
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
versions() { "$py" -c "import torch, transformers; print(f'torch {torch.__version__}, transformers {transformers.__version__}')"; }
if [ "$extras" = "test" ]; then
  before="$(versions)"
  "$py" -m pip install --quiet -e ".[test,conformance]"
  "$py" -m pip install --quiet --no-deps "dflash==0.1.0" "speculators==0.9.0" "specforge==0.2.0"
  after="$(versions)"
  if [ "$before" != "$after" ]; then
    echo "bootstrap: installing the reference packages changed $before -> $after" >&2
    exit 1
  fi
  if "$py" -c "import triton" >/dev/null 2>&1; then
    echo "bootstrap: triton is importable in .venv; CPU runs of hybrid targets would crash (uninstall it)" >&2
    exit 1
  fi
  "$py" -c "import dflash.model, speculators.models.dflash.core, speculators.convert.dflash.converter, specforge.runtime.data_plane.offline_reader" \
    || { echo "bootstrap: the conformance reference packages do not import" >&2; exit 1; }
fi
echo "dflash-eval installed: $(versions)"

#!/usr/bin/env bash
# The other end of the supported transformers range. The README's test command runs the whole suite on what
# a fresh install resolves today (.venv); this runs the tests that touch transformers' internals (pytest
# marker `compat`: Gated-DeltaNet kernel binding, caches, device maps, hybrid targets, generation,
# conformance with the reference packages) on the OLDEST transformers pyproject.toml admits (the GPU image's),
# in a venv of its own, .venv-compat. When a transformers release moves one of those internals, one of the
# two runs fails by name. Usage: bash scripts/compat.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
# the lower bound of `transformers>=X,<Y` in pyproject.toml's dependencies: one home for the range
oldest="$("$python" - <<'PY'
import re, pathlib
text = pathlib.Path("pyproject.toml").read_text()
found = re.search(r'"transformers>=([0-9.]+),<[0-9.]+"', text)
if not found:
    raise SystemExit("scripts/compat.sh: pyproject.toml has no \"transformers>=X,<Y\" dependency")
print(found.group(1))
PY
)"
venv=.venv-compat
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv"
fi
py="$venv/bin/python"
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  "$py" -m pip install --quiet "torch==2.13.0"
fi
"$py" -m pip install --quiet -e ".[test,conformance]" "transformers==$oldest"
"$py" -m pip install --quiet --no-deps "dflash==0.1.0" "speculators==0.9.0" "specforge==0.2.0"
got="$("$py" -c "import transformers; print(transformers.__version__)")"
if ! "$py" -c "import sys; from packaging.version import Version as V; sys.exit(V('$got') != V('$oldest'))"; then
  echo "compat: .venv-compat has transformers $got, not the oldest supported $oldest" >&2
  exit 1
fi
if "$py" -c "import triton" >/dev/null 2>&1; then
  echo "compat: triton is importable in $venv; CPU runs of hybrid targets would crash (uninstall it)" >&2
  exit 1
fi
echo "compat: transformers $got (the oldest supported), torch $("$py" -c "import torch; print(torch.__version__)"): pytest -m compat"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1 "$py" -m pytest -q -n 2 --dist loadfile -m compat "$@"

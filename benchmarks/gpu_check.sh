#!/usr/bin/env bash
# The GPU check, lease-proof (benchmarks/README.md): each part in its own process under its own time budget
# (all together under 8 minutes on one H200, so it can be rerun once within a 15-minute lease), unbuffered,
# every figure written to $OUT/PART.json as it is measured, and the summary table printed at the end
# whatever happened to the parts. Exit status: 0 when every part finished.
#
#   bash benchmarks/gpu_check.sh                on a CUDA machine, with the environment's packages as they are
#   bash benchmarks/gpu_check.sh --install-fla  where fla is absent: the bundled wheels (wheels/, fla 0.6.0) into
#                                               $OUT/work/site, on PYTHONPATH for this run only
#   bash benchmarks/gpu_check.sh --rehearse     every part on the CPU at tiny shapes with the stub fla package
# The first check on a new machine is benchmarks/gpu_probe.sh (8 minutes cold, three files); this one is the
# longer, second one.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
# the project's venv when there is one (scripts/bootstrap.sh makes .venv), else python3; $PYTHON overrides
if [[ -n "${PYTHON:-}" ]]; then
  python="$PYTHON"
elif [[ -x "$root/.venv/bin/python" ]]; then
  python="$root/.venv/bin/python"
else
  python="python3"
fi
if ! "$python" -c "import torch" >/dev/null 2>&1; then
  echo "gpu_check: $python cannot import torch, so no part can run; install first" \
       "(bash scripts/bootstrap.sh makes .venv) or give the interpreter: PYTHON=/path/to/python bash $0" >&2
  exit 2
fi
rehearse="" install=""
[[ "${1:-}" == "--rehearse" ]] && rehearse="--rehearse"
[[ "${1:-}" == "--install-fla" ]] && install="yes"
OUT="${OUT:-$here/out}"
mkdir -p "$OUT"
rm -f "$OUT"/*.json
cd "$root"
started=$(date +%s)

if [[ -n "$rehearse" ]]; then
  # the stub stands where the installed fla would: transformers binds it at import, like the real kernels
  export PYTHONPATH="$root/dflash_eval/testing/stub_fla${PYTHONPATH:+:$PYTHONPATH}"
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
elif [[ -n "$install" ]]; then  # never over the environment's own packages
  if "$python" -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('fla') else 1)"; then
    echo "gpu_check: fla is installed; --install-fla leaves it as it is"
  elif timeout 30 "$python" -m pip install --quiet --no-index --no-deps --target "$OUT/work/site" "$here"/wheels/*.whl; then
    export PYTHONPATH="$OUT/work/site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "gpu_check: installing the fla wheels failed; the parts run with whatever is installed"
  fi
fi
timeout 15 "$python" -c "import torch, transformers; import importlib.util as u; \
print('torch', torch.__version__, 'transformers', transformers.__version__, \
'fla', 'present' if u.find_spec('fla') else 'absent', 'cuda', torch.cuda.is_available(), flush=True)"

# part:budget in seconds. On the GPU the budgets with the install (30), the versions (15) and the summary (15)
# add up to 460 s < 8 minutes. The rehearsal's are caps for a slow shared CPU (it takes ~1-2 minutes alone).
if [[ -n "$rehearse" ]]; then
  budgets="${GPU_CHECK_BUDGETS:-bed:300 kernels:400 throughput:240 phases:300}"
else
  budgets="${GPU_CHECK_BUDGETS:-bed:75 kernels:110 throughput:85 phases:130}"
fi
statuses=()
for entry in $budgets; do
  part="${entry%%:*}"; budget="${entry##*:}"
  echo "=== $part (budget ${budget} s) ===" >&2
  timeout --kill-after=5 "$budget" "$python" -u benchmarks/gpu_check.py "$part" --out "$OUT" $rehearse
  rc=$?
  [[ $rc -ne 0 ]] && echo "gpu_check: part $part ended with status $rc" >&2
  statuses+=("$part=$rc")
done
timeout 15 "$python" -u benchmarks/gpu_check.py summary --out "$OUT" $rehearse --status "${statuses[@]}"
rc=$?
echo "gpu_check: $(( $(date +%s) - started )) s in all; figures in $OUT" >&2
exit $rc

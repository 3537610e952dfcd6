#!/usr/bin/env bash
# The first GPU check (benchmarks/gpu_probe.py; docs/gpu.md): one process, cold, within 8 minutes on one H100
# or H200, so a 15-minute lease holds a rerun. $OUT receives three files, nothing else: probe.json (the
# summary, rewritten after every figure), probe.log (everything printed) and triton-cache.tar.gz (the Triton
# and fla autotuning cache, to restore on the next run with --caches). The work folder (the Triton cache) is
# outside $OUT. Nothing is installed over the Python environment's packages.
#
#   bash benchmarks/gpu_probe.sh                        on a CUDA machine
#   bash benchmarks/gpu_probe.sh --caches FILE          restore a previous run's triton-cache.tar.gz first
#   bash benchmarks/gpu_probe.sh --install-bundled-fla  only where fla is absent: benchmarks/wheels/ (fla 0.6.0)
#                                                       into the work folder, put on PYTHONPATH for this run
#   bash benchmarks/gpu_probe.sh --rehearse             every part on the CPU at tiny shapes, stub fla
#
# Environment: OUT (default benchmarks/out/probe), PROBE_WORK (default a new folder under $TMPDIR or /tmp),
# PROBE_TIMEOUT (default 480 s: the probe's own deadline is 30 s earlier, so the summary is always written),
# PYTHON (default .venv/bin/python, else python3), OMP_NUM_THREADS (default: the CPUs, at most 8).
# Exit status: the probe's (0 when every part was ok, 1 when one was not, 124 at the deadline).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
rehearse="" caches="" install=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rehearse) rehearse="--rehearse" ;;
    --caches) caches="${2:-}"; shift ;;
    --install-bundled-fla) install="yes" ;;
    *) echo "gpu_probe: unknown argument $1 (--rehearse, --caches FILE, --install-bundled-fla)" >&2; exit 2 ;;
  esac
  shift
done
if [[ -n "${PYTHON:-}" ]]; then
  python="$PYTHON"
elif [[ -x "$root/.venv/bin/python" ]]; then
  python="$root/.venv/bin/python"
else
  python="python3"
fi
OUT="${OUT:-$here/out/probe}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
work="${PROBE_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/dflash-probe.XXXXXX")}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
case "$work/" in
  "$OUT"/*) echo "gpu_probe: the work folder $work is inside OUT=$OUT; give PROBE_WORK outside it" >&2; exit 2 ;;
esac
rm -f "$OUT/probe.json" "$OUT/probe.log" "$OUT/triton-cache.tar.gz" "$OUT/.probe.json.tmp"

probe() {
# one process, its threads set: OpenMP threads spinning on tiny CPU ops cost minutes (issue 47: 16 of them)
cpus="$(nproc 2>/dev/null || echo 8)"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( cpus < 8 ? cpus : 8 ))}"
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR="$work/triton"
mkdir -p "$TRITON_CACHE_DIR"
if [[ -n "$caches" ]]; then
  if tar xzf "$caches" -C "$work"; then
    echo "gpu_probe: Triton cache restored from $caches ($(du -sh "$TRITON_CACHE_DIR" | cut -f1))"
  else
    echo "gpu_probe: could not restore $caches; running cold"
  fi
fi
if [[ -n "$rehearse" ]]; then
  export PYTHONPATH="$root/dflash_eval/testing/stub_fla${PYTHONPATH:+:$PYTHONPATH}"
elif [[ -n "$install" ]]; then
  if "$python" -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('fla') else 1)"; then
    echo "gpu_probe: fla is installed; --install-bundled-fla leaves it as it is"
  elif timeout 60 "$python" -m pip install --quiet --no-index --no-deps --target "$work/site" "$here"/wheels/*.whl; then
    export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
    echo "gpu_probe: bundled fla 0.6.0 put in $work/site for this run only"
  else
    echo "gpu_probe: installing the bundled fla wheels failed; running without fla"
  fi
fi
echo "gpu_probe: python $python, OUT $OUT, work $work, OMP_NUM_THREADS $OMP_NUM_THREADS"
cd "$root"
started=$(date +%s)
timeout --kill-after=10 "${PROBE_TIMEOUT:-480}" "$python" -u benchmarks/gpu_probe.py --out "$OUT" $rehearse \
  --deadline "$(( ${PROBE_TIMEOUT:-480} - 30 ))"
rc=$?
tar czf "$OUT/triton-cache.tar.gz" -C "$work" triton 2>/dev/null \
  || echo "gpu_probe: could not pack the Triton cache"
echo "gpu_probe: exit $rc after $(( $(date +%s) - started )) s; in $OUT: probe.json probe.log triton-cache.tar.gz"
return $rc
}

probe 2>&1 | tee "$OUT/probe.log"
exit "${PIPESTATUS[0]}"

#!/usr/bin/env bash
# Every dflash-eval command once, as a user types it, on the bundled demo models: the exit status of each is
# checked and its time printed. .ci/run calls it right after the README's quick start, in that fresh base
# install (no extras); run it alone on any install:
#
#   bash scripts/smoke.sh [VENV]          # VENV default .venv: uses VENV/bin/dflash-eval and VENV/bin/python
#
# Tiny token counts (6 demo prompts x 24 new tokens): the whole pass takes about 2 minutes on 2 CPU cores,
# most of it the start of each process. Outputs and the continuation cache live in a temporary folder
# (kept and named when a step fails). The pass also fails when the CLI has a command it does not run.
set -uo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
DFLASH="$venv/bin/dflash-eval"
PY="$venv/bin/python"
for tool in "$DFLASH" "$PY"; do
  [ -x "$tool" ] || { echo "smoke: $tool not found (install first: bash scripts/bootstrap.sh)" >&2; exit 1; }
done
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" COLUMNS="${COLUMNS:-100}"
W="$(mktemp -d "${TMPDIR:-/tmp}/dflash-smoke.XXXXXX")"
export DFLASH_EVAL_CACHE="$W/cache"
M=dflash_eval/demo/models
T="$M/target"
REF="$M/demo-reference"
INH="$M/demo-inhouse"
SIZE=(--prompts demo --limit 6 --max-new-tokens 24 --no-thinking)
failed=()
ran=()

# step NAME COMMAND...: run it, keep its output in $W/NAME.log, check the exit status (0)
step() {
  local name="$1"; shift
  local start end status
  start=$(date +%s.%N)
  "$@" >"$W/$name.log" 2>&1
  status=$?
  end=$(date +%s.%N)
  printf 'smoke: %-15s exit %d  %5.1f s  %s\n' "$name" "$status" "$(awk "BEGIN { print $end - $start }")" "$*"
  if [ "$status" -ne 0 ]; then
    failed+=("$name")
    tail -n 15 "$W/$name.log" | sed 's/^/    /'
  fi
  [ "$1" = "$DFLASH" ] && ran+=("$2")
  return 0
}

# a JSON document on stdout of the previous step
is_json() {
  "$PY" -c "import json, sys; json.load(open(sys.argv[1]))" "$W/$1.log" 2>/dev/null \
    || { echo "smoke: $1 did not print one JSON document" >&2; failed+=("$1:json"); }
}

total_start=$(date +%s)
step version       "$DFLASH" --version
step inspect       "$DFLASH" inspect "$INH" --target "$T"
step plan          "$DFLASH" plan --target "$T" -d "$REF" -d "$INH" "${SIZE[@]}" --accelerator h200
step run           "$DFLASH" run --target "$T" -d "$REF" -d "$INH" "${SIZE[@]}" --draft-lengths 3,7 --accelerator h200 --out "$W/run"
step report        "$DFLASH" report "$W/run" --json
is_json report
step report-md     "$DFLASH" report "$W/run" --markdown
step show          "$DFLASH" show "$W/run" --worst 3
step diff          "$DFLASH" diff "$W/run:demo-reference" "$W/run:demo-inhouse"
step doctor        "$DFLASH" doctor --drafter "$INH" --target "$T" "${SIZE[@]}" --no-context-variants --out "$W/doctor"
step train         "$PY" -m dflash_eval.demo.train --target "$T" --save-dir "$W/save" --steps 20 --save-every 10 --max-new-tokens 16
step track         "$DFLASH" track "$W/save" --target "$T" --reference "$REF" "${SIZE[@]}" --out "$W/track"
step dump          "$PY" -m dflash_eval.testing.served_dump "$W/run:demo-reference" "$W/before.txt" "$W/after.txt" --k 3 --model demo
step served        "$DFLASH" served "$W/before.txt" "$W/after.txt" --model demo --run "$W/run:demo-reference"
step export        "$DFLASH" export-serving "$W/run" --drafter-name demo-reference --engine vllm --k 3 --out "$W/spec.txt"
step shard0        "$DFLASH" run --target "$T" -d "$REF" "${SIZE[@]}" --shard 0/2 --no-html --out "$W/s0"
step shard1        "$DFLASH" run --target "$T" -d "$REF" "${SIZE[@]}" --shard 1/2 --no-html --out "$W/s1"
step merge         "$DFLASH" merge "$W/s0" "$W/s1" --out "$W/merged"
step taps-data     "$PY" -m dflash_eval.testing.trainer_data "$W/taps" --target "$T" --taps 1,2,3
step trained-taps  "$DFLASH" trained-taps "$W/taps" --target "$T" -d "$REF" --limit 4 --noise-samples 2
step prompts-list  "$DFLASH" prompts list
step prompts-show  "$DFLASH" prompts show demo --id demo/0 --target "$T"

# every command of the CLI ran once (a new command joins this pass)
commands="$("$PY" -c "import typer.main
from dflash_eval.cli import app
print(' '.join(sorted(typer.main.get_command(app).commands)))")"
for command in $commands; do
  case " ${ran[*]} " in
    *" $command "*) ;;
    *) [ "$command" = demo ] || { echo "smoke: the command '$command' is not in this pass (scripts/smoke.sh)" >&2; failed+=("$command:missing"); } ;;
  esac
done

echo "smoke: ${#ran[@]} commands in $(( $(date +%s) - total_start )) s (demo: the quick start before this pass)"
if [ "${#failed[@]}" -ne 0 ]; then
  echo "smoke: FAILED: ${failed[*]} (outputs in $W)" >&2
  exit 1
fi
rm -rf "$W"

#!/usr/bin/env bash
# The user's path, first step of .ci/run: the README's main quick-start command (its first ```bash block)
# exactly as written, on a clean checkout, so in a fresh .venv with the base install only (no extras); then
# its result: exit 0, reports/demo/run.json holding the two taus the README states, and every base
# dependency of pyproject.toml installed (a missing one is named); then scripts/smoke.sh, every command once
# in that same install. Each step's time is printed.
#
#   bash scripts/user_path.sh            # on a fresh clone (refuses an existing .venv: it would not be fresh)
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -e .venv ]; then
  echo "user path: .venv already exists, so the base install would not be fresh; run .ci/run on a clean checkout" \
       "(git clone, then .ci/run)" >&2
  exit 1
fi
# the first ```bash block of the README: the main quick-start command
command="$(awk '/^```bash/ { inside = 1; next } /^```/ { if (inside) exit } inside' README.md)"
if [ -z "$command" ]; then
  echo "user path: README.md has no \`\`\`bash block (its first one is the quick start)" >&2
  exit 1
fi
export HF_HUB_OFFLINE=1
elapsed() { awk "BEGIN { printf \"%.0f\", $(date +%s.%N) - $1 }"; }
status=0

echo "user path: the README's quick start, as written: $command"
start=$(date +%s.%N)
bash -c "$command"
rc=$?
echo "user path: quick start exit $rc in $(elapsed "$start") s"
[ "$rc" -eq 0 ] || status=1

# every base dependency installed (what pip was asked for): a missing one named, whatever the demo said
if [ -x .venv/bin/python ]; then
  .venv/bin/python - <<'EOF' || status=1
import importlib.metadata as md
import re
import sys

missing = []
for requirement in md.requires("dflash-eval") or []:
    if "extra ==" in requirement:
        continue
    name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
    try:
        md.version(name)
    except md.PackageNotFoundError:
        missing.append(requirement)
for requirement in missing:
    print(f"user path: missing base dependency: {requirement} (pyproject.toml [project] dependencies)", file=sys.stderr)
sys.exit(1 if missing else 0)
EOF
else
  echo "user path: the quick start made no .venv/bin/python" >&2
  status=1
fi

# the demo's numbers are the README's: each drafter's tau macro, to 2 decimals, as the README states it
if [ -f reports/demo/run.json ]; then
  .venv/bin/python - <<'EOF' || status=1
import json
import re
import sys

run = json.load(open("reports/demo/run.json"))
readme = open("README.md", encoding="utf-8").read()
bad = 0
for drafter in run["drafters"]:
    name, tau = drafter["name"], drafter["metrics"]["tau_macro"]
    stated = re.search(re.escape(name) + r"\W+(?:tau\W+)?(\d+\.\d\d)\b", readme)
    if stated is None:
        print(f"user path: README.md states no tau for {name} (the demo gave {tau:.2f})", file=sys.stderr)
        bad = 1
    elif stated.group(1) != f"{tau:.2f}":
        print(f"user path: the demo gave {name} tau {tau:.2f}, the README says {stated.group(1)}", file=sys.stderr)
        bad = 1
    else:
        print(f"user path: {name} tau {tau:.2f}, as the README says")
sys.exit(bad)
EOF
else
  echo "user path: the quick start wrote no reports/demo/run.json" >&2
  status=1
fi

if [ "$status" -ne 0 ]; then
  echo "user path: FAILED before the smoke pass" >&2
  exit 1
fi
start=$(date +%s.%N)
bash scripts/smoke.sh .venv || status=1
echo "user path: smoke pass in $(elapsed "$start") s"
exit "$status"

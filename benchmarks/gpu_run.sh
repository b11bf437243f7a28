#!/usr/bin/env bash
# There, on a lent GPU machine that was sent .gpu/ (benchmarks/gpu_kit.sh): installs the carried wheels, unpacks the
# data, runs the GPU suite (its rows name the commit in .gpu/commit, as COMMIT-copy) and leaves in $OUT what comes
# back: the suite's log, the device, the new leaderboard rows, and the GPT-2-small entry's profile and trace.
# With the argument "reference": benchmarks/gpu_references.py instead of the suite (its files in $OUT; the kit made
# with "reference"). SCALE=0.05 runs the suite's small CPU check instead (no rows, no wheels installed: PYTHON names
# an environment that has the extras), to try this script on a machine without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu-out}
py=${PYTHON:-python3}
mkdir -p "$out"
if [ -z "${SCALE:-}" ] && compgen -G ".gpu/whl/*.whl" > /dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .gpu/whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
rm -rf /tmp/suite-data && tar xJf .gpu/suite-data.tar.xz -C /tmp || exit 1
# the rows name the kit's commit: git is kept out of it (the copy there can carry a .git whose status reads as
# uncommitted changes, and bench then refuses to write a row)
export ZOO_DATA=/tmp/suite-data ZOO_COMMIT="$(cat .gpu/commit)" GIT_DIR=/nonexistent-git
{ nvidia-smi 2>&1 || true; "$py" -c "import torch; print(torch.__version__, torch.cuda.is_available())"; \
  lscpu 2>&1 | head -20; } > "$out/device.txt"
if [ "${1:-suite}" = reference ]; then
  [ -d .gpu/cache ] && export ZOO_CACHE="$PWD/.gpu/cache"  # the fid_zoo networks the kit carried
  "$py" benchmarks/gpu_references.py --out "$out" ${DEADLINE:+--deadline "$DEADLINE"} $(cat .gpu/args 2>/dev/null)
  exit $?
fi
export ZOO_BOARD_DIR="$out/board"
mkdir -p "$ZOO_BOARD_DIR"
"$py" -m zoo bench --suite gpu --out /tmp/runs ${SCALE:+--scale "$SCALE"} 2>&1 | tee "$out/suite.log"
status=${PIPESTATUS[0]}
traced=$(grep -o "traced steps: .*profile.txt" "$out/suite.log" | head -1 | sed 's/traced steps: //')
if [ -n "$traced" ]; then
  cp "$traced" "$out/profile.txt"
  cp "$(dirname "$traced")/trace.json.gz" "$out/" 2>/dev/null || true
fi
echo "gpu_run: suite exit $status; back in $out: $(cd "$out" && find . -type f | sort | tr '\n' ' ')"
exit "$status"

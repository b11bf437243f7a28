#!/usr/bin/env bash
# Here, before a lent GPU is used: makes .gpu/, the folder that goes to the GPU machine beside the checkout
# (the device tool's carry: [".gpu"]): the wheels its image lacks (CPython 3.12, the versions tested here; not
# RDKit, 32 MB, which would take the whole past the 64 MiB a call may send: molecules/dmpnn's entry then stops with
# its one-line error and the others run), the GPU suite's data as one archive, and the commit the rows will name.
# Needs the data cache (ZOO_DATA) holding the suite's datasets (zoo data fetch linux-python-docs, say). Then, there:
#   bash benchmarks/gpu_run.sh        (device tool: command "bash benchmarks/gpu_run.sh", carry [".gpu"])
# With the argument "reference", the data is the reference runs' instead (37 MB, no linux-python-docs), for
# benchmarks/gpu_references.py (there: bash benchmarks/gpu_run.sh reference); ONLY="RECIPE ..." narrows it to
# those recipes' references, data and wheels (RDKit among them for a molecules recipe), MODE=cpu runs them on the
# host CPU (gpu_references.py --mode). Run it from a clean, committed tree: the rows name the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
grep -qsx '/.gpu/' .git/info/exclude || echo '/.gpu/' >> .git/info/exclude
[ -z "$(git status --porcelain)" ] || { echo "gpu_kit.sh: commit first: the rows name the commit (git status)" >&2; exit 1; }
rm -rf .gpu && mkdir -p .gpu/whl
# each domain's wheels, as tested here; RDKit (32 MB) goes only where ONLY names a molecules recipe
declare -A WHEELS=([contrastive]="kornia==0.9.0 kornia_rs==0.2.0" [diffusion]="diffusers==0.42.1 torch-fidelity==0.4.0"
  [protein]="fair-esm==2.0.0" [medical]="monai==1.6.1 nibabel==5.4.2" [tabular]="xgboost-cpu==3.2.0"
  [molecules]="rdkit==2026.9.1 xgboost-cpu==3.2.0")
domains="contrastive diffusion protein medical tabular"
[ -n "${ONLY:-}" ] && domains=$(for r in $ONLY; do echo "${r%%/*}"; done | sort -u)
wheels=$(for d in $domains; do echo "${WHEELS[$d]:-}"; done | tr ' ' '\n' | sort -u | tr '\n' ' ')
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl \
  $wheels
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
if [ "${1:-suite}" = reference ]; then
  # gpu_run.sh passes these to gpu_references.py there: the recipes (ONLY) and the mode (MODE: gpu or cpu)
  echo "${MODE:+--mode $MODE} ${ONLY:+--only $ONLY}" > .gpu/args
  "$python" benchmarks/gpu_references.py --copy-data "$staging/suite-data" $(cat .gpu/args)
  # the fid_zoo feature networks this machine trained (1.7 MB): diffusion's rows there are scored by the same
  # network as the rows here, not by one trained again on that machine's CPU
  cache=$("$python" -c "from zoo import checkout; checkout.install(); from recipe_zoo.core.flops import \
computed_cache_root as c; print(c())")
  if [ -d "$cache/features/fid_zoo" ]; then
    mkdir -p .gpu/cache/features && cp -r "$cache/features/fid_zoo" .gpu/cache/features/
  fi
else
  "$python" -m zoo bench --suite gpu --copy-data "$staging/suite-data"
fi
XZ_OPT=-T0 tar cJf .gpu/suite-data.tar.xz -C "$staging" suite-data
git rev-parse --short=9 HEAD > .gpu/commit  # the board names commits by 9 digits
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
total=$(( tree + $(du -sb .gpu | cut -f1) ))
echo ".gpu: $(du -sh .gpu | cut -f1); with the checkout $((total / 1048576)) MiB to send (64 MiB at most)"
[ "$total" -lt $((62 * 1048576)) ] || { echo "too large to send" >&2; exit 1; }

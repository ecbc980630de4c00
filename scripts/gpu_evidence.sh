#!/usr/bin/env bash
# The GPU evidence of issue 32 on an air-gapped GPU machine (docs/GPU.md):
#   bash scripts/gpu_evidence.sh BUNDLE OUT --part speed|train|base [--deadline S] [--device cpu|cuda] [...]
# Installs the bundle (scripts/offline_bundle.sh) with pip --no-index --no-deps into a temporary
# folder on PYTHONPATH, never touching the machine's torch, then runs one part
# (scripts/lab/offline/evidence.py; --help lists the dry-run options).  PYTHON picks the interpreter.
set -euo pipefail
start=$(date +%s)
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 BUNDLE OUT --part speed|train|base [--deadline S] [--device cpu|cuda]" >&2; exit 2; }
bundle=$(cd "$1" && pwd) out=$2
shift 2
[ -f "$bundle/requirements.txt" ] || { echo "error: $bundle is not a bundle (no requirements.txt): build it with scripts/offline_bundle.sh" >&2; exit 2; }
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
py=${PYTHON:-$py}
target=$(mktemp -d "${TMPDIR:-/tmp}/fast-decoding-site.XXXXXX")
echo "[evidence] installing $(tr '\n' ' ' < "$bundle/requirements.txt")into $target"
if "$py" -m pip --version >/dev/null 2>&1; then
  "$py" -m pip install -q --disable-pip-version-check --no-index --no-deps --find-links "$bundle/wheels" \
      --target "$target" -r "$bundle/requirements.txt"
else  # a site Python without pip: a wheel is a zip of the files it installs (console scripts aside)
  echo "[evidence] no pip for $py: unpacking this Python's wheels into $target"
  "$py" - "$bundle/wheels" "$target" <<'PY'
import pathlib, sys, zipfile
tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
for wheel in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    if wheel.name[:-4].split("-")[-3] in ("py3", tag):  # NAME-VERSION-PYTHON-ABI-PLATFORM.whl
        zipfile.ZipFile(wheel).extractall(sys.argv[2])
PY
fi
export PYTHONPATH="$target:$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" -m scripts.lab.offline.evidence --bundle "$bundle" --out "$out" --start "$start" "$@"

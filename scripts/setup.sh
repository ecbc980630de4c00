#!/usr/bin/env bash
# Create .venv with the pinned, working dependency set (idempotent; about 4 minutes the first time).
#   torch==2.13.0, the build that fits the machine (TORCH_VARIANT overrides):
#     cpu    no NVIDIA GPU: the CPU wheel (an unpinned or default torch pulls a multi-GB CUDA build)
#     cu126  an NVIDIA GPU of compute capability < 8.0 (V100 = 7.0, T4 = 7.5, P100 = 6.0): PyTorch's
#            CUDA 12.6 wheels are the newest that still carry Volta (sm_70) kernels; the CUDA 12.8 /
#            13.0 builds dropped sm_70 and older, so torch would import but find no kernel for a V100
#     cu128  compute capability >= 8.0 (A100, H100, L4, RTX 30/40/50xx): the newer CUDA build, which
#            also covers Blackwell (cu130 works the same way: TORCH_VARIANT=cu130)
#   The GPU is read with `nvidia-smi --query-gpu=name,compute_cap`; with several GPUs the lowest
#   capability decides.  CUDA wheels come from PyTorch's own index (download.pytorch.org/whl/<variant>)
#   and need an NVIDIA driver >= 525 (CUDA 12).
#   `bash scripts/setup.sh --print-variant` prints the choice and installs nothing.
#   fairseq-fixed==0.12.3.1 (PyPI fairseq 0.12.2 cannot import on Python 3.11). It is built from
#   source without build isolation, so its build uses the torch pinned here instead of fetching
#   the newest CUDA torch into a throw-away build environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=2.13.0

# ---- which torch build ----
variant=${TORCH_VARIANT:-}
if [ -z "$variant" ]; then
  variant=cpu
  if command -v nvidia-smi >/dev/null 2>&1; then
    if gpus=$(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null) && [ -n "$gpus" ]; then
      min_cc=$(echo "$gpus" | awk -F', *' '{print $NF}' | sort -n | head -1)
      echo "[setup] NVIDIA GPU(s): $(echo "$gpus" | tr '\n' ';' | sed 's/;$//') -> lowest compute capability $min_cc"
      if awk -v c="$min_cc" 'BEGIN {exit !(c < 8.0)}'; then variant=cu126; else variant=cu128; fi
    elif nvidia-smi -L >/dev/null 2>&1; then
      # drivers too old to report compute_cap: the CUDA 12.6 build runs on every GPU such a driver serves
      echo "[setup] NVIDIA GPU found, but this driver cannot report its compute capability: using cu126"
      variant=cu126
    fi
  fi
fi
case "$variant" in
  cpu|cu1[0-9][0-9]) ;;
  *) echo "error: TORCH_VARIANT=$variant: use cpu, cu126, cu128 or cu130" >&2; exit 2 ;;
esac
if [ "${1:-}" = "--print-variant" ]; then echo "$variant"; exit 0; fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
have_torch() {  # the pinned version of the wanted build is installed
  python - "$variant" "$TORCH_VERSION" <<'EOF' 2>/dev/null
import sys, torch
variant, version = sys.argv[1:]
public, _, local = torch.__version__.partition("+")
ok = public == version and (local == variant if variant != "cpu" else torch.version.cuda is None)
sys.exit(0 if ok else 1)
EOF
}
if python -c 'import fairseq, torch, sentencepiece, sacrebleu, ctranslate2, matplotlib, subword_nmt, sacremoses, fugashi, unidic_lite, MeCab, pytest, xdist, hypothesis, tqdm, tabulate' 2>/dev/null \
   && have_torch; then
  echo "[setup] .venv is ready (torch $TORCH_VERSION, $variant)"; exit 0
fi
echo "[setup] installing pinned dependencies into .venv (torch $TORCH_VERSION, $variant build)"
index="https://download.pytorch.org/whl/$variant"
reachable() { "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "$1/torch/" 2>/dev/null; }
case "$variant" in
  cpu)  # PyTorch's CPU index when it can be reached; else pip's own configuration (e.g. a local mirror)
    if reachable "$index"; then torch_spec="torch==$TORCH_VERSION+cpu"; torch_index=(--extra-index-url "$index")
    else torch_spec="torch==$TORCH_VERSION"; torch_index=(); fi ;;
  cu1[0-9][0-9])
    reachable "$index" || { echo "error: PyTorch's wheel index $index cannot be reached (the $variant build of torch is only there)" >&2; exit 1; }
    # the local version (+cu126) makes pip replace another build of the same torch version
    torch_spec="torch==$TORCH_VERSION+$variant"; torch_index=(--index-url "$index" --extra-index-url https://pypi.org/simple) ;;
esac
if [ "$variant" != cpu ] && command -v nvidia-smi >/dev/null 2>&1; then
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
  if [ -n "$driver" ] && [ "${driver%%.*}" -lt 525 ] 2>/dev/null; then
    echo "[setup] warning: NVIDIA driver $driver is older than 525: CUDA 12 builds of torch need >= 525" >&2
  fi
fi

python -m pip install -q --upgrade pip wheel "setuptools<81"
if ! have_torch; then
  python -m pip install -q "$torch_spec" "${torch_index[@]}"
  have_torch || { echo "error: torch $TORCH_VERSION ($variant) did not install; see the pip output above" >&2; exit 1; }
fi
python -m pip install -q numpy cython
# without CUDA_HOME fairseq builds only its CPU extensions (its optional CUDA kernels would need a
# matching nvcc; fairseq falls back to the CPU ones)
env -u CUDA_HOME python -m pip install -q --no-build-isolation fairseq-fixed==0.12.3.1
# data pipelines: Moses tokenisation (sacremoses), Japanese segmentation (fugashi + UniDic-lite),
# sacreBLEU's ja-mecab tokenizer (mecab-python3 + ipadic: the sacrebleu[ja] extra)
python -m pip install -q sentencepiece subword-nmt "sacrebleu[ja]>=2.0" sacremoses fugashi unidic-lite matplotlib ctranslate2 pytest pytest-xdist hypothesis tqdm tabulate
python -c 'import fairseq_plugins' 2>/dev/null || true
if [ "$variant" != cpu ]; then
  # a build without kernels for this GPU imports fine and fails at the first CUDA call: check now
  python - <<'EOF'
import sys, torch
if not torch.cuda.is_available():
    sys.exit(f"error: torch {torch.__version__} cannot use the GPU (NVIDIA driver >= 525 installed and visible?); "
             "fix that, or set TORCH_VARIANT=cpu")
archs = torch.cuda.get_arch_list()  # e.g. sm_70 ... sm_90, compute_90 (PTX, JIT-compiled for newer GPUs)
for i in range(torch.cuda.device_count()):
    cc = 10 * torch.cuda.get_device_capability(i)[0] + torch.cuda.get_device_capability(i)[1]
    native = f"sm_{cc}" in archs
    ptx = any(a.startswith("compute_") and int(a.split("_")[1]) <= cc for a in archs)
    if not (native or ptx):
        sys.exit(f"error: torch {torch.__version__} has no kernels for {torch.cuda.get_device_name(i)} (sm_{cc}; "
                 f"it has {' '.join(archs)}): rerun with TORCH_VARIANT=cu126")
print(f"[setup] torch {torch.__version__} runs on {torch.cuda.get_device_name(0)} ({' '.join(archs)})")
EOF
fi
echo "[setup] done: $(python -c 'import fairseq, torch; print("fairseq", fairseq.__version__, "torch", torch.__version__)')"

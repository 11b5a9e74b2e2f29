#!/usr/bin/env bash
# Optional GPU decoding (`DecodeOptions(decoder="dali")`, issue 28): NVIDIA DALI and its TensorFlow
# plugin into the project's venv. Usage: bash scripts/install_dali.sh [PYTHON] (`make dali`).
#
# Why not a pip extra: the plugin (nvidia-dali-tf-plugin-cuda120) is a source package that compiles
# against the installed TensorFlow at install time (g++ needed), so it must be installed in a second
# pip call after TensorFlow and DALI, with --no-build-isolation (pip >= 25.3); it needs CUDA headers,
# taken here from PyPI's nvidia-cuda-runtime-cu12 and nvidia-cuda-nvcc-cu12 merged into one folder
# named by CUDA_HOME; --no-cache-dir, because pip would otherwise reuse a wheel built against an
# older TensorFlow.
set -euo pipefail
PY=${1:-.venv/bin/python}
DALI_VERSION=2.4.0
"$PY" -m pip install -q "nvidia-dali-cuda120==$DALI_VERSION" nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12
NVIDIA=$("$PY" -c "import nvidia, os; print(list(nvidia.__path__)[0])")
CUDA_HOME=$(mktemp -d)
trap 'rm -rf "$CUDA_HOME"' EXIT
mkdir -p "$CUDA_HOME/include"
cp -r "$NVIDIA/cuda_runtime/include/." "$CUDA_HOME/include/"
cp -r "$NVIDIA/cuda_nvcc/include/." "$CUDA_HOME/include/"
CUDA_HOME="$CUDA_HOME" "$PY" -m pip install -q --no-build-isolation --no-cache-dir \
    "nvidia-dali-tf-plugin-cuda120==$DALI_VERSION"
"$PY" -c "import nvidia.dali.plugin.tf as t; print('DALI TensorFlow plugin:', t.__name__, 'ok')"

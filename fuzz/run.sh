#!/usr/bin/env bash
# Runs a fuzz target briefly: fuzz/run.sh [TARGET] [SECONDS]
# Installs cargo-fuzz if missing; uses nightly when installed, else stable with
# RUSTC_BOOTSTRAP=1. New inputs go to a scratch directory, so the repository's corpus
# (the seeds) stays as committed. Crashes are written to fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")"
target="${1:-pdu_decode}"
seconds="${2:-20}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --version 0.13.2 --locked
fi

toolchain=()
if rustup run nightly rustc --version >/dev/null 2>&1; then
    toolchain=(+nightly)
else
    export RUSTC_BOOTSTRAP=1
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "corpus/$target"
cargo "${toolchain[@]}" fuzz run "$target" "$scratch" "corpus/$target" -- \
    -max_total_time="$seconds" -max_len=8192 -rss_limit_mb=2048

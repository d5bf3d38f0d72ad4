#!/usr/bin/env bash
# The README's first command needs only the Rust toolchain: clones the committed HEAD into
# a temp dir, builds the workspace there from scratch (its own target dir, offline from the
# registry cache, debug profile) with protoc unusable (PROTOC names a file that is not
# executable, and a `protoc` first on PATH fails), then runs the `ferrobay up` + Linux guest
# smoke test (crates/ferrobay/tests/up_guest.rs) against the binary built there.
# Run by scripts/test.sh after the main suite (which has fetched every crate and built that
# test); needs QEMU and the guest image like the suite does. Prints how long each part took.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/ferrobay-fresh-clone.XXXXXX")
trap 'rm -rf "$work"' EXIT

git clone --quiet --no-local "$repo" "$work/src"
echo "fresh-clone: building $(git -C "$work/src" rev-parse --short HEAD) in $work/src without protoc"

mkdir "$work/bin"
# Any attempt to run protoc leaves a mark and fails.
cat >"$work/bin/protoc" <<EOF
#!/bin/sh
echo "protoc was run: \$0 \$*" >>"$work/protoc-ran"
echo "fresh-clone: protoc must not be needed" >&2
exit 1
EOF
chmod +x "$work/bin/protoc"
printf 'not a program\n' >"$work/bin/protoc-not-executable"

start=$SECONDS
(
    cd "$work/src"
    PATH="$work/bin:$PATH" PROTOC="$work/bin/protoc-not-executable" \
        CARGO_TARGET_DIR="$work/target" cargo build --workspace --locked --offline
)
build_s=$((SECONDS - start))
if [ -e "$work/protoc-ran" ]; then
    echo "fresh-clone: the build ran protoc:" >&2
    cat "$work/protoc-ran" >&2
    exit 1
fi
bin="$work/target/debug/ferrobay"
[ -x "$bin" ] || { echo "fresh-clone: no $bin after the build" >&2; exit 1; }

start=$SECONDS
# `--workspace` keeps the feature set of the main suite's build, so the test is not rebuilt.
out="$work/up_guest.out"
FERROBAY_UP_BIN="$bin" cargo test --workspace --locked --test up_guest -- --nocapture 2>&1 |
    tee "$out"
guest_s=$((SECONDS - start))
# A skipped guest (no QEMU or image) proves nothing here.
if grep -q '^SKIP:' "$out"; then
    echo "fresh-clone: the guest smoke test was skipped: $(grep '^SKIP:' "$out")" >&2
    exit 1
fi
grep -q "running $bin" "$out" || { echo "fresh-clone: the test did not run $bin" >&2; exit 1; }
echo "fresh-clone: build ${build_s}s, ferrobay up + guest ${guest_s}s"

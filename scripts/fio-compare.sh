#!/usr/bin/env bash
# Measure the disk under DIR with fio the way `strata profile` does, for comparing the two
# (issue 19; not run by CI). Needs fio (Debian: apt-get install fio).
#
#   scripts/fio-compare.sh [DIR] [FILE_SIZE] [SECONDS]
#
# - affine: random reads at queue depth 1 (psync, O_DIRECT) of 4 KiB .. 16 MiB: mean latency
#   per size, to fit s + t·x as strata does;
# - PDAM: 1 .. 64 threads (psync, O_DIRECT), random 64 KiB reads: aggregate bandwidth.
# Prints "affine <bytes> <mean µs>" and "pdam <threads> <MiB/s>" lines. This disk varies between
# 0.7 and 1.5 GiB/s from minute to minute: compare with strata profile interleaved, not hours apart.
set -euo pipefail
dir=${1:-${TMPDIR:-/tmp}}
size=${2:-1G}
secs=${3:-3}
file="$dir/fio-compare.scratch"
trap 'rm -f "$file"' EXIT
# Lay the file out on the device first (as strata's fill step does).
fio --name=fill --filename="$file" --size="$size" --rw=write --bs=4M --direct=1 \
    --ioengine=psync --end_fsync=1 --output-format=terse >/dev/null
for bs in 4k 8k 16k 32k 64k 128k 256k 512k 1m 2m 4m 8m 16m; do
    lat=$(fio --name=affine --filename="$file" --size="$size" --rw=randread --bs=$bs \
        --direct=1 --ioengine=psync --iodepth=1 --time_based --runtime="$secs" \
        --output-format=json | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print(j["clat_ns"]["mean"]/1000)')
    echo "affine $bs $lat"
done
for t in 1 2 4 8 16 32 64; do
    bw=$(fio --name=pdam --filename="$file" --size="$size" --rw=randread --bs=64k --direct=1 \
        --ioengine=psync --numjobs=$t --group_reporting --time_based --runtime="$secs" \
        --output-format=json | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print(j["bw_bytes"]/2**20)')
    echo "pdam $t $bw"
done

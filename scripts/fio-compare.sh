#!/usr/bin/env bash
# fio against `strata profile` on the same disk (issue 19; not run by CI).
#
#   scripts/fio-compare.sh [-d DIR] [-s SIZE] [-r ROUNDS] [-t SECONDS] [-b STRATA] [-f] [-T]
#
#   -d DIR      directory on the disk to measure            (default: .)
#   -s SIZE     scratch file size, for both tools           (default: 1G, as --quick uses)
#   -r ROUNDS   rounds; each runs both tools, order swapped  (default: 3)
#   -t SECONDS  fio's time per point                         (default: 1)
#   -b STRATA   the strata binary        (default: target/release/strata, else `strata` on PATH)
#   -f          full `strata profile` instead of --quick
#   -T          fio --thread (threads of one process) instead of fio's default, processes
#   -A DIR      summarise the rounds kept in DIR again, measuring nothing
#   KEEP=DIR    keep each round's raw figures (fio.N, strata.N.json) in DIR
#
# Both tools read the same kind of file (SIZE bytes, written sequentially with O_DIRECT and
# synced first) with O_DIRECT and the same points: random reads at queue depth 1 of 4 KiB ..
# 16 MiB at 4 KiB-aligned offsets (affine: s + t·x), and p = 1 .. 64 readers of random 64 KiB
# blocks, each with one read outstanding (PDAM: P, saturation). The tools alternate within a
# round and the summary takes medians over rounds: this disk's throughput moves by ±30% from one
# minute to the next, so one run of each, minutes apart, compares two moments, not two tools.
#
# Each point's median over rounds is fitted here the plain way, for both tools: s and t by least
# squares with relative weights on every size; saturation = mean bandwidth at p ≥ 16; P =
# saturation / bandwidth at p = 1 (the PDAM's own ratio: P blocks per step at saturation, one per
# step alone). Beside them, the median of what `strata profile` itself reported (its robust and
# segmented fits): the first comparison shows a measuring gap, the second the whole one. Needs
# python3; installs fio from Debian's packages if it is missing (as root).
set -euo pipefail

dir=. size=1G rounds=3 secs=1 strata="" full=0 thread=0 again=""
while getopts "d:s:r:t:b:fTA:h" o; do
    case $o in
        d) dir=$OPTARG ;; s) size=$OPTARG ;; r) rounds=$OPTARG ;; t) secs=$OPTARG ;;
        b) strata=$OPTARG ;; f) full=1 ;; T) thread=1 ;; A) again=$OPTARG ;;
        *) sed -n '2,14p' "$0"; exit 2 ;;
    esac
done

if [ -n "$again" ]; then
    KEEP=$again
    rounds=$(ls "$again"/fio.* | wc -l)
fi
if [ -z "$again" ] && ! command -v fio >/dev/null; then
    echo "fio is missing: installing it from Debian's packages" >&2
    apt-get install -y fio >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y fio >/dev/null; }
fi
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$strata" ] && [ -z "$again" ]; then
    if [ -x "$here/target/release/strata" ]; then strata="$here/target/release/strata"
    elif [ -n "${CARGO_TARGET_DIR:-}" ] && [ -x "$CARGO_TARGET_DIR/release/strata" ]; then
        strata="$CARGO_TARGET_DIR/release/strata"
    else strata=$(command -v strata) || { echo "no strata binary: build with cargo build --release or pass -b" >&2; exit 2; }
    fi
fi

out=${KEEP:-$(mktemp -d)}
mkdir -p "$out"
file="$dir/.fio-compare.$$.scratch"
trap 'rm -f "$file"; [ -n "${KEEP:-}" ] || rm -rf "$out"' EXIT
sizes="4k 8k 16k 32k 64k 128k 256k 512k 1m 2m 4m 8m 16m"
threads="1 2 4 8 16 32 64"
fio_flags=(--filename="$file" --size="$size" --direct=1 --ioengine=psync --output-format=json)
[ "$thread" = 1 ] && fio_flags+=(--thread)
json_field() { python3 -c "import json,sys; r=json.load(sys.stdin)['jobs'][0]['read']; print($1)"; }

run_fio() { # round
    local r=$1
    # Lay the file out on the device as strata's fill step does: sequential 4 MiB writes, synced.
    fio --name=fill "${fio_flags[@]}" --rw=write --bs=4M --end_fsync=1 >/dev/null
    for bs in $sizes; do
        fio --name=affine "${fio_flags[@]}" --rw=randread --bs="$bs" --blockalign=4k --norandommap \
            --iodepth=1 --time_based --runtime="$secs" |
            json_field "'affine', r['io_bytes'] // max(r['total_ios'], 1), r['lat_ns']['mean'] / 1e9" |
            tr -d "(),'" >>"$out/fio.$r"
    done
    for p in $threads; do
        fio --name=pdam "${fio_flags[@]}" --rw=randread --bs=64k --blockalign=4k --norandommap \
            --numjobs="$p" --group_reporting --time_based --runtime="$secs" |
            json_field "'pdam', $p, r['bw_bytes']" | tr -d "(),'" >>"$out/fio.$r"
    done
    rm -f "$file"
}

run_strata() { # round
    local r=$1 q=--quick
    [ "$full" = 1 ] && q=""
    "$strata" profile --dir "$dir" --size "$size" $q --no-save --json >"$out/strata.$r.json"
}

for r in $(seq "$rounds"); do
    [ -n "$again" ] && break
    start=$(date +%s)
    if [ $((r % 2)) = 1 ]; then run_strata "$r"; run_fio "$r"
    else run_fio "$r"; run_strata "$r"; fi
    echo "round $r done in $(($(date +%s) - start)) s" >&2
done

python3 - "$out" "$rounds" "$size" "$thread" "$full" <<'EOF'
import json, statistics as st, sys
out, rounds = sys.argv[1], int(sys.argv[2])
size, thread, full = sys.argv[3], sys.argv[4] == "1", sys.argv[5] == "1"
med = st.median

def wls(xs, ys):
    # s + t·x by least squares with weights 1/y² (relative errors: 4 KiB counts as 16 MiB does)
    w = [1 / y / y for y in ys]
    sw, sx, sy = sum(w), sum(a * b for a, b in zip(w, xs)), sum(a * b for a, b in zip(w, ys))
    sxx = sum(a * b * b for a, b in zip(w, xs)); sxy = sum(a * b * c for a, b, c in zip(w, xs, ys))
    t = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    return (sy - t * sx) / sw, t

def by_rule(bw):  # {threads: bytes/s} -> (saturation, P)
    sat = st.mean(v for p, v in bw.items() if p >= 16)
    return sat, sat / bw[1]

MiB = 2 ** 20
lat = {"fio": {}, "strata": {}}   # size -> [mean latency per round]
bw = {"fio": {}, "strata": {}}    # threads -> [bytes/s per round]
own = {k: [] for k in ["s", "t", "sat", "P"]}  # strata's own fitted figures, per round
for r in range(1, rounds + 1):
    for line in open(f"{out}/fio.{r}"):
        kind, a, b = line.split()
        d = lat["fio"] if kind == "affine" else bw["fio"]
        d.setdefault(int(a), []).append(float(b))
    j = json.load(open(f"{out}/strata.{r}.json"))
    a, d = j["affine"], j["pdam"]
    for q in a["points"]:
        lat["strata"].setdefault(q["bytes"], []).append(q["mean_s"])
    for q in d["points"]:
        bw["strata"].setdefault(q["threads"], []).append(q["bytes_per_s"])
    for k, v in [("s", a["setup_s"]), ("t", a["per_byte_s"]),
                 ("sat", d["saturation_bytes_per_s"]), ("P", d["parallelism"])]:
        own[k].append(v)
    print(f"round {r}: strata profile s {a['setup_s']*1e6:.1f} µs, t {a['per_byte_s']*1e9:.3f} ns/B, "
          f"saturation {d['saturation_bytes_per_s']/MiB:.0f} MiB/s, P {d['parallelism']:.2f}")

def figures(tool):
    sizes = sorted(lat[tool])
    s, t = wls(sizes, [med(lat[tool][x]) for x in sizes])
    sat, P = by_rule({p: med(v) for p, v in bw[tool].items()})
    return s, t, sat, P

f, g = figures("fio"), figures("strata")
o = [med(own["s"]), med(own["t"]), med(own["sat"]), med(own["P"])]
print(f"\n{size} scratch file, O_DIRECT, {rounds} rounds; fio as {'threads' if thread else 'processes'}, "
      f"strata profile {'(full)' if full else '--quick'}")
print("fio, strata points: each point's median over rounds, fitted here (s, t: least squares with\n"
      "weights 1/y²; saturation: mean at p >= 16; P: saturation / p = 1). strata profile: the\n"
      "median over rounds of what strata profile reported (its own fits).")
print(f"{'':18} {'fio':>9} {'strata points':>14} {'ratio':>7} {'strata profile':>15} {'ratio':>7}")
for k, scale, i in [("s µs", 1e6, 0), ("t ns/B", 1e9, 1), ("saturation MiB/s", 1 / MiB, 2), ("P", 1, 3)]:
    print(f"{k:18} {f[i]*scale:9.3f} {g[i]*scale:14.3f} {g[i]/f[i]:6.2f}× {o[i]*scale:15.3f} {o[i]/f[i]:6.2f}×")
print(f"\nrandom reads at queue depth 1, mean µs (median over rounds)\n{'size':>9} {'fio':>9} {'strata':>9}")
for x in sorted(lat["fio"]):
    print(f"{x:9} {med(lat['fio'][x])*1e6:9.1f} {med(lat['strata'][x])*1e6:9.1f}")
print(f"\n64 KiB random reads, MiB/s (median over rounds)\n{'threads':>9} {'fio':>9} {'strata':>9}")
for p in sorted(bw["fio"]):
    print(f"{p:9} {med(bw['fio'][p])/MiB:9.0f} {med(bw['strata'][p])/MiB:9.0f}")
EOF

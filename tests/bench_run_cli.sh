#!/bin/bash
# bench/run without running a cluster: every bad option value is refused with one line and a
# non-zero exit; --help names every option; the plans bench/search.jq proposes around a recorded
# Halda plan (the 70B-like case of issue 15); and --analyze-only on made-up run directories (a
# Halda run, two search runs, prima.cpp runs that worked and that crashed): TPOT, Halda's
# prediction error, the search summary and prima.cpp's figures from its own eval lines.
set -u
here=$(cd "$(dirname "$0")" && pwd)
run=$here/../bench/run
for tool in jq gnuplot; do
    command -v "$tool" >/dev/null || { echo "SKIPPED: $tool is not installed"; exit 77; }
done
tmp=$(mktemp -d /tmp/prima-bench-run.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# refused ARGS...: one line on stderr naming bench/run, nothing on stdout, a non-zero exit
refused() {
    "$run" "$@" >"$tmp/out" 2>"$tmp/err" && { fail "accepted: $*"; return; }
    [ -s "$tmp/out" ] && fail "$*: wrote to stdout"
    [ "$(wc -l <"$tmp/err")" = 1 ] || fail "$*: not one line: $(cat "$tmp/err")"
    grep -q '^bench/run: ' "$tmp/err" || fail "$*: $(cat "$tmp/err")"
}
refused --search
refused --search 0
refused --search 41
refused --search x
refused --search 3 --search-reps 0
refused --search-reps 10
refused --search 3 --search-confirm 10
refused --search 3 --search-confirm x
refused --tokens 0
refused --tokens 1x
refused --warmup -1
refused --primacpp-lw foo
refused --primacpp-lw m=1,,2
refused --primacpp-lw =1,2
refused --primacpp-timeout 0
refused --primacpp-timeout abc
refused --primacpp
refused --primacpp-env
refused --primacpp-env novalue
refused --primacpp-env "1X=2"
refused --primacpp "$tmp/nowhere"
refused --strategies primacpp
refused --strategies "halda primacpp-lw-prefetch"
refused --strategies bogus
refused --only nosuch
refused --only paper-4dev/nosuch
refused --bogus

"$run" --help >"$tmp/help" 2>&1 || fail "--help failed"
for opt in $(grep -oE '^    --?[a-z][a-z0-9-]*\)' "$run" | tr -d ' )'); do
    grep -q -- "$opt" "$tmp/help" || fail "--help does not mention $opt"
done

# --- bench/search.jq on Halda's plan for the 70B-like (k = 7, windows 1/2/8/1, 80 layers)
plan='{"event":"plan","found":true,"n_layer":80,"k":7,"tpot":1.9,"devices":[
  {"name":"0:d1","window":1,"in_ring":true},{"name":"1:d2","window":2,"in_ring":true},
  {"name":"2:d3","window":8,"in_ring":true},{"name":"3:d4","window":1,"in_ring":true},
  {"name":"4:d5","window":0,"in_ring":false,"left_out":"left out"}]}'
busy='{"d1":100,"d2":200,"d3":1500,"d4":50}'
jq -nc --argjson plan "$plan" --argjson busy "$busy" --argjson n 40 -f "$here/../bench/search.jq" >"$tmp/cands" ||
    fail "search.jq failed"
jq -e '.[0] == {change: "halda-by-hand", names: ["d1","d2","d3","d4"], windows: [1,2,8,1], k: 7}' "$tmp/cands" >/dev/null ||
    fail "search: Halda's own plan does not come first: $(jq -c '.[0]' "$tmp/cands")"
jq -e '.[1].change == "move 1 layer/round d3 -> d4"' "$tmp/cands" >/dev/null ||
    fail "search: the first move is not from the busiest to the idlest device: $(jq -c '.[1]' "$tmp/cands")"
jq -e '.[1:] | all(.k == ((80 + (.windows | add) - 1) / (.windows | add) | floor))' "$tmp/cands" >/dev/null ||
    fail "search: a neighbour's k is not the rounds its windows need"
jq -e '[.[] | select(.change | startswith("move")) | .windows | add] | length == 12 and all(. == 12)' "$tmp/cands" >/dev/null ||
    fail "search: moves: not 12, or the window total changed"
jq -e '[.[] | .change] | (index("k 7 -> 6") != null) and (index("k 7 -> 8") != null)
    and (index("leave out d2") != null) and (index("add d5") != null)' "$tmp/cands" >/dev/null ||
    fail "search: k - 1, k + 1, leave out or add missing: $(jq -c '[.[] | .change]' "$tmp/cands")"
jq -e '.[] | select(.change == "add d5") | .names == ["d1","d2","d3","d4","d5"] and .windows == [1,2,7,1,1]' "$tmp/cands" >/dev/null ||
    fail "search: add d5: $(jq -c '.[] | select(.change == "add d5")' "$tmp/cands")"
jq -e '[.[] | [.names, .windows]] | length == (unique | length)' "$tmp/cands" >/dev/null || fail "search: duplicates"
jq -nc --argjson plan "$plan" --argjson busy "$busy" --argjson n 3 -f "$here/../bench/search.jq" >"$tmp/cands3"
jq -e 'length == 4 and ([.[1:][] | .change | split(" ")[0]] == ["move", "k", "leave"])' "$tmp/cands3" >/dev/null ||
    fail "search: --search 3 does not take the kinds in turn: $(jq -c '[.[] | .change]' "$tmp/cands3")"

# --- --analyze-only on made-up runs of paper-4dev/llama3-8b-like (3 devices a, b, c)
res=$tmp/res
runs=$res/runs
mkdir -p "$runs"
cat >"$tmp/cluster.json" <<'EOF'
{"name": "t", "devices": [{"name": "a", "memory_mib": 100}, {"name": "b", "memory_mib": 100}, {"name": "c", "memory_mib": 100}]}
EOF
t0=1796140000
# device-side files of a run: DIR
emu_files() {
    jq -n '{devices: [("a", "b", "c") | {name: ., os: "linux", budget: 104857600, peak_total: 52428800,
        disk_read: 0, major_faults: 0, net_tx: 0, net_rx: 0, cpu_s: 1}]}' >"$1/summary.json"
    for t in 0 1 2; do for d in a b c; do
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' $((t0 + t)) $d 10485760 0 $((t * 1000000)) $((t * 1000)) 0
    done; done >"$1/timeline.tsv"
}
# a prima run: NAME STEP_MS... (one batch event per step after the prompt, serial 0, 1, ...)
prima_run() {
    local dir=$runs/paper-4dev-llama3-8b-like-$1 t=$t0 s=0; shift
    mkdir -p "$dir"
    emu_files "$dir"
    {
        echo '{"event":"plan","found":true,"n_layer":16,"k":1,"tpot":0.092,"terms":{"compute":0.08,"network":0.012},"devices":[{"name":"0:a","window":8,"in_ring":true,"time":{"compute":0.04,"wait":0.05}},{"name":"1:b","window":8,"in_ring":true},{"name":"2:c","window":0,"in_ring":false,"left_out":"x"}],"time":'$t0'}'
        for ms in 0 "$@"; do
            t=$(awk -v t="$t" -v ms="$ms" 'BEGIN { printf "%.3f", t + ms / 1000 }')
            for dev in 0 1; do
                echo '{"event":"batch","device":'$dev',"serial":'$s',"time":'$t',"compute_ns":40000000,"wait_ns":1000000,"major_faults":0,"disk_bytes":0,"pages":10,"pages_resident":10}'
            done
            s=$((s + 1))
        done
    } >"$dir/head.stats"
    printf 'kind=prima\nstatus=0\nmodel_bytes=1000000\ncluster=%s\nlw=\nk=\n' "$tmp/cluster.json" >"$dir/case"
    echo "$dir"
}
prima_run halda 500 100 120 110 300 >/dev/null                 # warm-up 1, 4 measured: median 115
d=$(prima_run search-00-r1 500 125 125 125 125)
printf 'change=halda-by-hand\n' >>"$d/case"
prima_run exo 500 90 90 90 90 >/dev/null                      # a candidate too: the best
d=$(prima_run search-01-r1 500 100 100 100 100)
printf 'change=move 1 layer/round a -> b\n' >>"$d/case"
# a second pass in which the machine ran faster for Halda's plan: pass by pass, Halda took 1.25
# and 0.8 times the candidate's TPOT (median 1.025), where the medians of all runs say 115 / 90
d=$(prima_run search-00-r2 500 80 80 80 80)
printf 'change=halda-by-hand\n' >>"$d/case"
d=$(prima_run search-01-r2 500 100 100 100 100)
printf 'change=move 1 layer/round a -> b\n' >>"$d/case"
# prima.cpp: NAME STATUS (its eval line says 19 runs at 105.26 ms, which bench/run reports but
# does not take for TPOT, with no space after its parenthesis as it prints 5-digit figures; c got
# no layer)
primacpp_run() {
    local dir=$runs/paper-4dev-llama3-8b-like-$1
    mkdir -p "$dir"
    emu_files "$dir"
    cp "$tmp/cluster.json" "$dir/cluster.json"
    {
        echo "$t0.5 Using window size: 3, GPU layers: 0"
        [ "$2" = 0 ] || echo "$t0.6 GGML_ASSERT(final_solution.size() == n_world * 2 && \"Invalid solution\") failed"
        [ "$2" != 0 ] || {
            # a token sampled at each of these times: warm-up 1, then steps of 100, 110, 120, 130 ms
            for t in 1.000 1.500 1.600 1.710 1.830 1.960; do echo "$((t0 + ${t%.*})).${t#*.} n_remain: 9"; done
            echo "$t0.9 llama_perf_context_print: prompt eval time =     500.00 ms /     5 tokens (  100.00 ms per token,    10.00 tokens per second)"
            echo "$((t0 + 2)).000 llama_perf_context_print:        eval time =    2000.00 ms /    19 runs   (105.26 ms per token,     9.50 tokens per second)"
        }
    } >"$dir/head.err"
    echo "Using window size: 5, GPU layers: 0" >"$dir/b.log"
    echo "No layer is assigned to me, exit." >"$dir/c.log"
    note=""
    [ "$2" = 0 ] || note="GGML_ASSERT(final_solution.size() == n_world * 2 && \"Invalid solution\") failed"
    printf 'kind=primacpp\nstatus=%s\nmodel_bytes=1000000\ncluster=%s\nlw=\nn_layer=16\nnote=%s\n' "$2" "$tmp/cluster.json" "$note" >"$dir/case"
}
primacpp_run primacpp-fio1 0
primacpp_run primacpp 139
# a run whose emulator failed before anything ran: only its case file
mkdir -p "$runs/paper-4dev-llama3-8b-like-primacpp-single"
printf 'kind=primacpp\nstatus=1\nmodel_bytes=1000000\ncluster=%s\nlw=\nn_layer=16\nnote=a rank failed\n' "$tmp/cluster.json" \
    >"$runs/paper-4dev-llama3-8b-like-primacpp-single/case"

"$run" --analyze-only --only paper-4dev/llama3-8b-like --warmup 1 --tokens 4 --results "$res" >"$tmp/out" 2>&1 ||
    fail "--analyze-only: $(tail -3 "$tmp/out")"
row() { grep "^paper-4dev,llama3-8b-like,[0-9]*,$1," "$res/$2"; }
field() { awk -F, -v n="$2" '{ print $n }' <<<"$1"; }
r=$(row halda results.csv)
[ "$(field "$r" 9)" = 115.0 ] || fail "halda: TPOT median $(field "$r" 9), not 115.0: $r"
[ "$(field "$r" 10)" = 300.0 ] || fail "halda: TPOT p90 $(field "$r" 10), not 300.0"
[ "$(field "$r" 7)" = 92 ] || fail "halda: predicted $(field "$r" 7), not 92"
[ "$(field "$r" 16)" = -20.0 ] || fail "halda: prediction error $(field "$r" 16) %, not -20.0"
grep -q '"compute=80.0 network=12.0","compute=80.0 other=35.0"' <<<"$r" || fail "halda: terms: $r"
grep -q '^"paper-4dev","llama3-8b-like","halda","a",.*,"compute=40.0 wait=50.0"$' "$res/devices.csv" ||
    fail "devices.csv: Halda's prediction for device a: $(grep '"halda","a"' "$res/devices.csv")"
r=$(row primacpp-fio1 results.csv)
[ "$(field "$r" 9),$(field "$r" 10),$(field "$r" 11),$(field "$r" 12)" = 115.0,130.0,115.0,4 ] ||
    fail "primacpp-fio1: TPOT median, p90, mean, steps not 115.0,130.0,115.0,4: $r"
grep -q 'its eval line: 105.26 ms/token over 19 runs' <<<"$r" || fail "primacpp-fio1: its eval line is not in the note: $r"
[ "$(field "$r" 8)" = 10.00 ] || fail "primacpp-fio1: prefill $(field "$r" 8), not 10.00"
[ "$(field "$r" 6)" = '"k=2 w=3/5/0"' ] || fail "primacpp-fio1: plan $(field "$r" 6)"
[ "$(field "$r" 13)" = 0.3 ] || fail "primacpp-fio1: disk MB per token $(field "$r" 13), not 0.3 (3 devices x 1 MB/s x 0.46 s / 4)"
r=$(row primacpp results.csv)
[ "$(field "$r" 5)" = 139 ] && [ "$(field "$r" 9)" = nan ] || fail "primacpp crash: $r"
grep -q 'Invalid solution' <<<"$r" || fail "primacpp crash: no note: $r"
grep -q '| exit 139: GGML_ASSERT' "$res/results.md" || fail "results.md: the crash is not in the status column"
r=$(row primacpp-single results.csv)
[ "$(field "$r" 5),$(field "$r" 9)" = 1,nan ] || fail "a run with nothing but its case file: $r"
s=$(grep '^paper-4dev,llama3-8b-like,' "$res/search-summary.csv")
[ "$(field "$s" 4),$(field "$s" 5)" = 115.0,3 ] || fail "search summary: Halda's median of its 3 runs is not 115.0: $s"
[ "$(field "$s" 8),$(field "$s" 10)" = 90.0,27.8 ] || fail "search summary: best/gap: $s"
[ "$(field "$s" 11),$(field "$s" 12),$(field "$s" 13),$(field "$s" 14)" = '"move 1 layer/round a -> b",2,2.5,yes' ] ||
    fail "search summary: paired best (2 pairs, Halda 2.5 % slower: within 10 %): $s"
[ "$(grep -c '^paper-4dev,.*,search-0[01]-r1,' "$res/search.csv")" = 2 ] || fail "search.csv: not two runs"
# every row has as many fields as its header (no comma inside a field)
for f in results.csv search.csv search-summary.csv devices.csv; do
    awk -F, 'NR == 1 { n = NF } NF != n { print FILENAME ": row " NR " has " NF " fields, the header " n; bad = 1 } END { exit bad }' \
        "$res/$f" || fail "$f: rows and header disagree"
done
grep -q '| llama3-8b-like | k=1 w=8/8/0 | 115.0 (3) | exo strategy (k=1 memory-proportional): k=1 w=8/8/0 | 90.0 (1) | 27.8 | move 1 layer/round a -> b (2) | 2.5 | yes | 4 |' "$res/results.md" ||
    fail "results.md: no search summary row"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "bench/run: all checks passed"

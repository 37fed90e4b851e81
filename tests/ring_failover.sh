#!/bin/bash
# Failover end to end, with real workers on loopback: in rings of 3 and 4 devices a worker is
# killed (SIGKILL) or frozen (SIGSTOP) at a random moment of the prefill or of the decode; every
# answer completes, equals the uninterrupted one (greedy, and sampled with a seed) and the head
# prints one line naming the lost device, the new plan and the recovery time. With --no-failover
# the head stops instead, naming the device. PRIMA_FAILOVER_TRIALS sets the number of trials per
# ring size (default 4); the recovery times are printed at the end. In a chat, a worker lost
# before a turn is planned around and, restarted, rejoins for the next one.
set -u
. "$(dirname "$0")/support/ring_workers.sh" ring-failover

big=$tmp/big.gguf
"$prima" mkmodel -o "$big" --layers 6 --type q8_0 --seed 7 >/dev/null 2>&1 || fail "mkmodel"
prompt=$(for _ in $(seq 20); do printf "once upon a time there "; done)
run_args=(-m "$big" -p "$prompt" -n 200 -t 1 -b 16)
greedy=(--temp 0)
sampled=(--temp 0.8 --seed 42)
"$prima" run "${run_args[@]}" "${greedy[@]}" >"$tmp/greedy.txt" 2>"$tmp/err" ||
    fail "single device: $(cat "$tmp/err")"
"$prima" run "${run_args[@]}" "${sampled[@]}" >"$tmp/sampled.txt" 2>/dev/null
n_prompt=$(sed -n 's/^prima: prompt \([0-9]*\) tokens.*/\1/p' "$tmp/err")
start_ms=$(date +%s%N)
# how long an uninterrupted run takes, to place the faults inside it
workers=()
for i in 1 2 3; do
    wlog[$i]=$tmp/w$i.log
    start_worker "$big" "${wlog[$i]}"
    workers+=("127.0.0.1:$port")
    wpid[$i]=${pids[-1]}
done
# Wait until the worker's log shows the plan of one more session: the ring is up.
planned() { # log count
    for _ in $(seq 400); do [ "$(grep -c ': plan: device' "$1")" -gt "$2" ] && return 0; sleep 0.01; done
    return 1
}
"$prima" run "${run_args[@]}" "${greedy[@]}" --workers "${workers[0]},${workers[1]},${workers[2]}" \
    -lw 1,2,1,2 >"$tmp/ring.txt" 2>"$tmp/err" &
head=$!
planned "${wlog[1]}" 0
t0=$(date +%s%N)
wait $head || fail "uninterrupted ring: $(cat "$tmp/err")"
span_ms=$((($(date +%s%N) - t0) / 1000000))
prefill_ms=$(sed -n 's/^prima: prompt [0-9]* tokens in \([0-9.]*\) s.*/\1/p' "$tmp/err" |
             awk '{ printf "%d", $1 * 1000 }')
cmp -s "$tmp/greedy.txt" "$tmp/ring.txt" || fail "the uninterrupted ring differs from one device"

trials=${PRIMA_FAILOVER_TRIALS:-4}
kill_times=() stop_times=() phases=()
trial() { # n_dev signal mode(greedy|sampled) phase(prefill|decode)
    local n_dev=$1 sig=$2 mode=$3 phase=$4
    local list="${workers[0]}" lw=1,2,1,2
    case $n_dev in
    4) list="$list,${workers[1]},${workers[2]}" ;;
    3) list="$list,${workers[1]}"; lw=2,2,2 ;;
    2) lw=0,6 ;;   # the worker holds every layer and decodes on its own
    esac
    local victim=$((RANDOM % (n_dev - 1) + 1))
    local mode_args=("${greedy[@]}")
    [ "$mode" = sampled ] && mode_args=("${sampled[@]}")
    local sessions
    sessions=$(grep -c ': plan: device' "${wlog[$victim]}")
    "$prima" run "${run_args[@]}" "${mode_args[@]}" --workers "$list" -lw $lw \
        >"$tmp/out.txt" 2>"$tmp/err" &
    local head=$!
    planned "${wlog[$victim]}" "$sessions" || fail "$n_dev devices: the ring did not start"
    # a random moment of the phase (as long as the uninterrupted ring took for it)
    local from=0 len=$prefill_ms
    [ "$phase" = decode ] && { from=$prefill_ms; len=$(((span_ms - prefill_ms) * 8 / 10)); }
    sleep "$(awk -v a=$from -v l=$len -v r=$RANDOM 'BEGIN { printf "%.3f", (a + l * r / 32768) / 1000 }')"
    kill -"$sig" "${wpid[$victim]}" 2>/dev/null
    local waited=0
    while kill -0 $head 2>/dev/null && [ $waited -lt 300 ]; do sleep 0.1; waited=$((waited + 1)); done
    if kill -0 $head 2>/dev/null; then
        fail "$n_dev devices, $sig of device $victim: the head still runs after 30 s"
        kill -9 $head
    fi
    wait $head
    local status=$?
    local want=$tmp/$mode.txt
    [ $status = 0 ] || fail "$n_dev devices, $sig of device $victim ($mode): exit $status: $(grep '^prima: ' "$tmp/err" | tail -n 2)"
    cmp -s "$want" "$tmp/out.txt" ||
        fail "$n_dev devices, $sig of device $victim ($mode): the answer differs"
    local line
    line=$(grep "^prima: lost device $victim " "$tmp/err" | head -n 1)
    if [ -n "$line" ]; then
        echo "$n_dev devices, $sig device $victim ($mode): ${line#prima: }"
        grep -q "new plan: $((n_dev - 1)) device(s)" <<<"$line" || fail "plan after the loss: $line"
        local secs rebuilt
        secs=$(sed -n 's/.*recovered in \([0-9.]*\) s.*/\1/p' <<<"$line")
        rebuilt=$(sed -n 's/.* \([0-9]*\) position(s) rebuilt.*/\1/p' <<<"$line")
        [ "$sig" = KILL ] && kill_times+=("$secs") || stop_times+=("$secs")
        [ "${rebuilt:-0}" -lt "$n_prompt" ] && phases+=(prefill) || phases+=(decode)
    elif grep -q "device $victim" "$tmp/err"; then
        fail "$n_dev devices, $sig of device $victim: no failover line: $(grep '^prima: ' "$tmp/err")"
    else
        echo "$n_dev devices, $sig device $victim: the answer was complete before the fault"
    fi
    # the victim is replaced by a fresh worker for the next trial
    { kill -9 "${wpid[$victim]}"; wait "${wpid[$victim]}"; } 2>/dev/null
    # a log of its own: reading the old one could find the old worker's port
    wlog[$victim]=$tmp/w$victim.$RANDOM$RANDOM.log
    start_worker "$big" "${wlog[$victim]}"
    workers[$((victim - 1))]="127.0.0.1:$port"
    wpid[$victim]=${pids[-1]}
}

for ((t = 0; t < trials; t++)); do
    sig=KILL
    [ $((t % 3)) = 2 ] && sig=STOP
    mode=greedy
    [ $((t % 2)) = 1 ] && mode=sampled
    phase=prefill
    [ $((t % 4)) -ge 2 ] && phase=decode
    trial 2 $sig $mode $phase
    trial 3 $sig $mode $phase
    trial 4 $sig $mode $phase
done

# --no-failover: the head stops with an error naming the lost device, as before
"$prima" run "${run_args[@]}" "${greedy[@]}" -n 100000 -c 4096 --context-shift --no-failover \
    --workers "${workers[0]},${workers[1]}" -lw 2,2,2 >/dev/null 2>"$tmp/err" &
head=$!
sleep 0.5
{ kill -9 "${wpid[2]}"; wait "${wpid[2]}"; } 2>/dev/null
for _ in $(seq 70); do kill -0 $head 2>/dev/null || break; sleep 0.1; done
kill -0 $head 2>/dev/null && { fail "--no-failover: the head still runs"; kill -9 $head; }
wait $head
[ $? = 1 ] && grep -q "^prima: .*device 2 (${workers[1]})" "$tmp/err" ||
    fail "--no-failover: $(tail -n 2 "$tmp/err")"

# A chat: a worker killed before the second turn is planned around; restarted on its port, it
# rejoins for the third; every reply equals the single-device chat's.
chat_model=$fixtures/models/stories260K.gguf
turns=("hello there" "tell me a story" "and then")
printf '%s\n' "${turns[@]}" | "$prima" run -m "$chat_model" -cnv --temp 0 -n 16 -t 1 \
    >"$tmp/chat_one.txt" 2>/dev/null
for i in 1 2; do start_worker "$chat_model" "$tmp/chat$i.log"; cport[$i]=$port; cpid[$i]=${pids[-1]}; done
mkfifo "$tmp/chat_in"
"$prima" run -m "$chat_model" -cnv --temp 0 -n 16 -t 1 -lw 1,2,2 \
    --workers 127.0.0.1:${cport[1]},127.0.0.1:${cport[2]} <"$tmp/chat_in" >"$tmp/chat_ring.txt" \
    2>"$tmp/chat_err" &
head=$!
exec 7>"$tmp/chat_in"
turn() { # text: send one turn, wait for its reply (the next prompt)
    local before
    before=$(grep -o '> ' "$tmp/chat_ring.txt" | wc -l)
    echo "$1" >&7
    for _ in $(seq 100); do [ "$(grep -o '> ' "$tmp/chat_ring.txt" | wc -l)" -gt "$before" ] && return; sleep 0.05; done
}
for _ in $(seq 100); do grep -q '> ' "$tmp/chat_ring.txt" && break; sleep 0.05; done
turn "${turns[0]}"
{ kill -9 "${cpid[2]}"; wait "${cpid[2]}"; } 2>/dev/null
turn "${turns[1]}"
"$prima" worker -m "$chat_model" --host 127.0.0.1 --port "${cport[2]}" -t 1 >"$tmp/chat2b.log" 2>&1 7>&- &
pids+=($!)
for _ in $(seq 100); do grep -q "listening" "$tmp/chat2b.log" && break; sleep 0.05; done
turn "${turns[2]}"
exec 7>&-
wait $head || fail "chat with failover: $(tail -n 2 "$tmp/chat_err")"
cmp -s "$tmp/chat_one.txt" "$tmp/chat_ring.txt" || fail "the chat's replies differ from one device's"
grep -q "^prima: lost device 2 (127.0.0.1:${cport[2]})" "$tmp/chat_err" || fail "chat: no failover line"
grep -q "^prima: rejoin of 127.0.0.1:${cport[2]}; new plan: 3 device(s)" "$tmp/chat_err" ||
    fail "chat: the restarted worker did not rejoin: $(grep '^prima: ' "$tmp/chat_err")"
grep "^prima: lost\|^prima: rejoin" "$tmp/chat_err"

range() { printf '%s\n' "$@" | sort -n | sed -n '1p;$p' | paste -sd- ; }
echo "recovery after SIGKILL: ${#kill_times[@]} trials, $(range "${kill_times[@]:-0}") s;" \
     "after SIGSTOP (plus 5 s to notice): ${#stop_times[@]} trials, $(range "${stop_times[@]:-0}") s;" \
     "faults in prefill: $(printf '%s\n' "${phases[@]:-}" | grep -c prefill)," \
     "in decode: $(printf '%s\n' "${phases[@]:-}" | grep -c decode);" \
     "$((($(date +%s%N) - start_ms) / 1000000000)) s in all"
[ $fails = 0 ] && echo "all failover checks passed"
exit $((fails > 0))

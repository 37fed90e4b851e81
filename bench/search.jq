# bench/search.jq — plans next to Halda's, for `bench/run --search` (jq -n -f bench/search.jq).
#
# Input ($plan): Halda's plan event (src/cluster/stats.h; `prima plan --json`); $busy: measured
# milliseconds per token of each ring device in Halda's run, by name; $n: how many plans at most.
# Output: Halda's own plan first ("halda-by-hand": the same plan given with -lw and -k, so that
# the search compares like with like and shows the run-to-run spread), then up to $n neighbours,
# as {change, names (the devices of the ring, in the cluster file's order), windows, k}:
#   move      one layer per round from one device to another (the busiest givers first, to
#             the idlest takers);
#   k-1, k+1  one round fewer or more, the windows scaled to the new total (largest remainders;
#             k is then the rounds those windows need: ceil(layers / total));
#   leave     a worker left out, its layers spread over the others in proportion;
#   add       a device Halda left out taken back with one layer per round (from the largest
#             window).
# The four kinds take turns, so that a small $n still tries each kind; duplicates and Halda's
# own plan are dropped.

def name0: sub("^[0-9]+:"; "");
# Integers in proportion to the weights, summing to $total (largest remainders; ties to the
# first device).
def scale($total):
    . as $w | ($w | add) as $sum
    | if $sum == 0 then map(0) else
        [$w[] | . * $total / $sum] as $q | [$q[] | floor] as $f
        | ($total - ($f | add)) as $left
        | [range(0; $q | length) | {i: ., r: ($q[.] - $f[.])}] | sort_by(-.r) | .[0:$left] | map(.i) as $up
        | [range(0; $f | length) | $f[.] + (if (. as $i | $up | index([$i])) != null then 1 else 0 end)]
      end;
def rounds($L): (map(.) | add) as $W | if $W == 0 then 0 else (($L + $W - 1) / $W | floor) end;
def plan($change; $names; $windows; $L): {change: $change, names: $names, windows: $windows, k: ($windows | rounds($L))};
# Take turns over several lists.
def interleave: . as $lists | [range(0; [$lists[] | length] | max // 0) as $i | $lists[] | .[$i] // empty];

$plan | .n_layer as $L | .k as $k
| [.devices[] | {name: (.name | name0), window, ring: .in_ring}] as $all
| [$all[] | select(.ring)] as $ring
| [$ring[] | .name] as $names | [$ring[] | .window] as $w | ($w | add) as $W
| {change: "halda-by-hand", names: $names, windows: $w, k: $k} as $self
| ($names | length) as $m
| ([range(0; $m) as $i | range(0; $m) as $j
   | select($i != $j and $w[$i] > 0 and ($W - $w[$i] + 1 > 0))
   | {p: (($busy[$names[$i]] // 0) - ($busy[$names[$j]] // 0)),
      c: plan("move 1 layer/round \($names[$i]) -> \($names[$j])"; $names;
              ($w | .[$i] -= 1 | .[$j] += 1); $L)}]
  | sort_by(-.p) | map(.c)) as $moves
| [(if $k > 1 then $w | scale(($L + $k - 2) / ($k - 1) | floor) else empty end),
   (if $k < $L then $w | scale(($L + $k) / ($k + 1) | floor) else empty end)
   | plan("k"; $names; .; $L) | select(.k != $k) | .change = "k \($k) -> \(.k)"]
  as $ks
| ([range(1; $m) as $i | select($m > 1)
   | {p: ($busy[$names[$i]] // 0),
      c: plan("leave out \($names[$i])"; ($names | del(.[$i])); ($w | del(.[$i]) | scale($W)); $L)}]
  | sort_by(.p) | map(.c)) as $leaves
| ($w | to_entries | max_by(.value) | .key) as $big
| [$all | to_entries[] | select(.value.ring | not) | .key as $at
   | ([$all[:$at][] | select(.ring)] | length) as $pos
   | plan("add \(.value.name)"; ($names | .[:$pos] + [$all[$at].name] + .[$pos:]);
          ($w | .[$big] -= (if $W > 1 then 1 else 0 end) | .[:$pos] + [1] + .[$pos:]); $L)]
  as $adds
| [$moves, $ks, $leaves, $adds] | interleave
| map(select(.k >= 1 and (.windows | all(. >= 0))))
| reduce .[] as $c ([]; if any(.[]; .names == $c.names and .windows == $c.windows) or
                           ($c.names == $self.names and $c.windows == $self.windows)
                        then . else . + [$c] end)
| [$self] + .[:$n]

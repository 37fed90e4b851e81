# spec_summary.awk — the summary of bench/spec.sh and bench/spec_emu.sh: per case and device
# count, the range of tokens/s of plain and speculative runs, of their ratio within each
# alternating pair, the evaluations and the acceptance. Input: their TSV (header first).
NR > 1 {
    k = $1 "\t" $2
    if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
    v[k, $3, $4] = $5; r[k] = $4 + 0 > r[k] ? $4 + 0 : r[k]
    if ($3 == "spec") { acc[k] = $7; ev[k] = $6 }
}
function range(k, m,   i, lo, hi, x) {
    for (i = 1; i <= r[k]; i++) { x = v[k, m, i] + 0; if (i == 1 || x < lo) lo = x; if (i == 1 || x > hi) hi = x }
    return sprintf("%.0f-%.0f", lo, hi)
}
END {
    printf "case\tdevices\tplain tok/s\tspec tok/s\tspec/plain (per pair)\tevaluations\tacceptance %%\n"
    for (j = 1; j <= nk; j++) {
        k = order[j]; lo = hi = 0; first = 1
        for (i = 1; i <= r[k]; i++) {
            if (!(v[k, "plain", i] > 0 && v[k, "spec", i] > 0)) continue  # a failed run
            x = v[k, "spec", i] / v[k, "plain", i]
            if (first || x < lo) lo = x; if (first || x > hi) hi = x; first = 0
        }
        printf "%s\t%s\t%s\t%.2f-%.2f\t%s\t%s\n", k, range(k, "plain"), range(k, "spec"), lo, hi, ev[k], acc[k]
    }
}

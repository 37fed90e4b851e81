# cli_error.sh — sourced by the shell tests of a command's errors, after they define fail and
# $tmp: `error STATUS PATTERN COMMAND...` runs the command and counts a failure unless it exits
# with STATUS and says one line on stderr that matches PATTERN (an extended regex).
error() { # STATUS PATTERN COMMAND...
    local want=$1 pat=$2
    shift 2
    "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    [ $rc -eq "$want" ] || fail "$*: exit status $rc, expected $want"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$*: stderr is not one line: $(cat "$tmp/err")"
    grep -Eq -e "$pat" "$tmp/err" || fail "$*: error lacks '$pat': $(cat "$tmp/err")"
}

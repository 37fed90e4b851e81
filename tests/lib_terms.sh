#!/bin/bash
# lib_terms.sh — the library speaks in its own terms, never in the command line's flags: no
# string literal in src/ outside src/cli/ names a flag ("-lw", "--workers", "--%s"). A library
# error says what is wrong ("layer windows: ...", "n_head 5 is not ..."); the command line maps
# those words to its flags (cli_say_flags in src/cli/main.c). A break names the file, the line
# and the flag; an exception is a line of the allow-list, with its reason.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)

# "FILE WORD   reason": words that look like flags and are not prima's.
allow=(
    "src/text/jinja_value.c -inf   a number, as Python prints it"
    "src/text/jinja_value.c -Infinity   a number, as JSON tools print it"
    "src/model/model.c -l   the shell's ulimit -l, which raises the locked-memory limit"
)

files=()
for dir in "$root"/src/*/; do
    [ "$(basename "$dir")" = cli ] && continue
    while IFS= read -r f; do files+=("$f"); done < <(find "$dir" -name '*.[ch]' | sort)
done
[ ${#files[@]} -gt 0 ] || { echo "FAIL: no library sources under $root/src"; exit 1; }

# FILE:LINE: WORD for every flag-like word that begins a word of a string literal, comments
# left out (a header may say which flag sets a field; a message may not).
found=$(perl -e '
for my $f (@ARGV) {
    open my $h, "<", $f or die "$f: $!\n";
    local $/; my $s = <$h>; close $h;
    $s =~ s{/\*.*?\*/}{ (my $c = $&) =~ s/[^\n]//g; $c }gse;   # keep the line count
    my $line = 1;
    while ($s =~ /\G(?:(\/\/[^\n]*)|([^"\x27\/\n]+|\/)|(\n)|(\x27(?:\\.|[^\x27\\\n])*\x27)|"((?:\\.|[^"\\\n])*)")/gc) {
        if (defined $3) { $line++; next }
        next unless defined $5;
        my $lit = $5;
        print "$f:$line: $1\n" while $lit =~ /(?:^|[\s(\[,`\x27])(--[a-zA-Z%][a-zA-Z0-9_-]*|-[a-zA-Z][a-zA-Z0-9_-]*)/g;
    }
    # a file this reader cannot follow to its end would hide its flags
    print "$f:$line: (unreadable from here)\n" if (pos($s) // 0) != length $s;
}' "${files[@]}") || { echo "FAIL: perl could not read the sources"; exit 1; }

fails=0
while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    rel=${hit#"$root"/}
    file=${rel%%:*}
    word=${rel##*: }
    ok=0
    for a in "${allow[@]}"; do
        [ "${a%%   *}" = "$file $word" ] && ok=1
    done
    [ $ok = 1 ] && continue
    echo "FAIL: $rel: library code names the flag '$word' (say it in the library's terms; the CLI maps them)"
    fails=$((fails + 1))
done <<<"$found"

[ $fails -eq 0 ] || { echo "$fails flag(s) named in library code"; exit 1; }
echo "lib_terms: no library file names a command-line flag (${#files[@]} files)"

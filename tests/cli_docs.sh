# The command reference in docs/cli must be exactly the binary's --help text.
exec "$(dirname "$0")/../scripts/cli-docs.sh" --check

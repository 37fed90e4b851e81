#!/bin/sh
# quickstart.sh — set up prima on a fresh Debian 12 machine and run the main job: a three-device
# pipelined ring on this machine (two workers on loopback plus the head), on a small generated
# model. Extra arguments go to `prima cluster` (e.g. -m your.gguf -p "your prompt").
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
exec build/prima cluster --devices 3 -n 32 "$@"

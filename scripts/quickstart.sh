#!/bin/sh
# quickstart.sh — set up prima on a fresh Debian 12 machine and run the main job: a three-device
# pipelined ring on this machine (two workers on loopback plus the head), on a small generated
# model. Extra arguments go to `prima cluster` (e.g. -m your.gguf -p "your prompt").
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
# --ignore-eos: the demo model's weights are random, and an end-of-generation token drawn
# early would cut the demo short; the ring's work shows in the table of devices at the end.
exec build/prima cluster --devices 3 -n 32 --ignore-eos "$@"

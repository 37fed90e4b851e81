#!/bin/bash
# prima serve's web page in headless Chromium (Debian's chromium, driven by playwright-core
# from web/test): chat with streaming, markdown, stop, conversations kept in local storage,
# the layout at a phone's width, the cluster view of a 3-device loopback ring, and a server with
# an API key. The screenshots are test artifacts: BUILD/test-artifacts/serve_web*.png, at
# 1280x800 and 390x844 (-phone*) (not committed).
set -u
source "$(dirname "$0")/support/ring_workers.sh" serve-web
source "$(dirname "$0")/support/serve.sh"
web=$(cd "$(dirname "$0")/../web/test" && pwd)
chromium=${CHROMIUM:-/usr/bin/chromium}
command -v node >/dev/null && [ -d "$web/node_modules/playwright-core" ] && [ -x "$chromium" ] ||
    { echo "SKIPPED: node, $web/node_modules/playwright-core (npm ci in web/test) or $chromium missing (scripts/deps.sh --test installs them)"; exit 77; }
# a model slow enough (a few ms per token) that a long reply is still running when Stop is hit
model=$fixtures/models/synth-spm512-l4-e256-f32.gguf
start_worker "$model" "$tmp/w1.log" && p1=$port && start_worker "$model" "$tmp/w2.log" && p2=$port || exit 1
start_server "$tmp/serve.log" -m "$model" --workers "127.0.0.1:$p1,127.0.0.1:$p2" -lw 2,1,1 -c 4096 || exit 1
if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$sport/")" = 404 ]; then
    echo "SKIPPED: this prima was built without its web page (npm ci in web/page, then rebuild)"
    exit 77
fi
artifacts=$(dirname "$prima")/test-artifacts
mkdir -p "$artifacts"
HOME=$tmp timeout 180 node "$web/page.test.mjs" "http://127.0.0.1:$sport" "$artifacts/serve_web.png" ||
    fail "page checks (above); server log: $(tail -5 "$tmp/serve.log")"
grep -q "cancelled" "$tmp/serve.log" || fail "the stop button did not cancel the generation on the server"
stop_server "$tmp/serve.log"
# with an API key: the page asks for it
start_server "$tmp/serve-key.log" -m "$model" --api-key "web-test-key" || exit 1
HOME=$tmp timeout 120 node "$web/key.test.mjs" "http://127.0.0.1:$sport" web-test-key "$artifacts/serve_web-key.png" ||
    fail "API key checks (above); server log: $(tail -5 "$tmp/serve-key.log")"
stop_server "$tmp/serve-key.log"
[ "$fails" = 0 ] && echo "serve_web: all passed (screenshots: $artifacts/serve_web*.png)"
exit $((fails > 0))

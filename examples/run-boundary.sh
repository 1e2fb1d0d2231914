#!/usr/bin/env bash
# `make run-boundary`: a standalone stockade boundary with an example policy and a
# local offline upstream; shows an allowed request, a denied one and a
# REFUSED DNS answer with their audit lines, then keeps serving until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/stockade}
RUN=${RUN_DIR:-$(mktemp -d -t stockade-run.XXXXXX)}
PROXY=127.0.0.1:3128 DNS_PORT=5353 UPSTREAM=127.0.0.1:18080
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

go build -o "$RUN/upstream" ./examples/upstream
"$RUN/upstream" -listen "$UPSTREAM" & pids+=($!)
"$BIN" boundary serve --policy examples/policy.yaml --hosts examples/hosts \
  --proxy "$PROXY" --dns "127.0.0.1:$DNS_PORT" --audit "$RUN/audit.jsonl" \
  --allow-loopback-upstream --log-format json --ready-file "$RUN/boundary.ready" 2>"$RUN/boundary.log" & pids+=($!)

for _ in $(seq 1 100); do
  [ -s "$RUN/boundary.ready" ] && break
  kill -0 "${pids[1]}" 2>/dev/null || { cat "$RUN/boundary.log"; exit 1; }
  sleep 0.1
done

show() { printf '\n$ %s\n' "$*"; eval "$@" || true; }
echo "stockade boundary: proxy http://$PROXY, DNS 127.0.0.1:$DNS_PORT (UDP+TCP), upstream $UPSTREAM"
echo "policy: examples/policy.yaml, audit: $RUN/audit.jsonl, log: $RUN/boundary.log"
show "curl -sS -x http://$PROXY http://api.example.test:18080/hello"
show "curl -sS -x http://$PROXY http://other.example.test:18080/hello"
show "dig +short @127.0.0.1 -p $DNS_PORT api.example.test"
show "dig @127.0.0.1 -p $DNS_PORT unlisted.example.org | grep -E 'status|ANSWER:'"
printf '\nAudit (one line each, from the log):\n'
grep '"component":"audit"' "$RUN/boundary.log" | sed -E 's/.*"msg":"([^"]*)".*/  \1/'
printf '\nAudit (JSON lines, last one):\n  '; tail -n 1 "$RUN/audit.jsonl"
cat <<TXT

Try more while it runs (Ctrl-C stops everything):
  HTTPS_PROXY=http://$PROXY HTTP_PROXY=http://$PROXY curl http://api.example.test:18080/
  curl -x http://$PROXY http://api.example.test:9999/         # 403 endpoint_not_allowed (port)
  dig @127.0.0.1 -p $DNS_PORT +tcp api.example.test
  kill -HUP ${pids[1]}                                        # reload the policy
  tail -f $RUN/audit.jsonl
TXT
wait "${pids[1]}"

#!/usr/bin/env bash
# `make run`: a gateway on the embedded default (bbolt state, process
# driver) with one sample sandbox whose workload calls a local offline
# upstream through the sandbox's proxy every few seconds. Nothing leaves the
# machine. Ctrl-C stops the gateway; the sandbox keeps running until
# deleted (that is the point), so the script deletes it on the way out,
# and removes its temporary dir (state, CA and the client credential).
#
# Addresses from the environment (defaults in brackets):
#   STOCKADE_LISTEN          the gateway's API [127.0.0.1:7420]; the SSH relay
#                            takes a free port on the same host
#   STOCKADE_UPSTREAM_PORT   the local upstream on 127.0.0.1 [18080]
#   RUN_DIR                  keep state here instead of a temporary dir (kept)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/stockade}
if [ -n "${RUN_DIR:-}" ]; then RUN=$RUN_DIR OWN_RUN=; else RUN=$(mktemp -d -t stockade-run.XXXXXX) OWN_RUN=1; fi
API=${STOCKADE_LISTEN:-127.0.0.1:7420}
UPORT=${STOCKADE_UPSTREAM_PORT:-18080}
STATE="$RUN/state" UPSTREAM=127.0.0.1:$UPORT
export STOCKADE_GATEWAY=$API
S="--state-dir $STATE"
pids=()
cleanup() {
  trap - EXIT INT TERM
  "$BIN" sandbox delete demo $S >/dev/null 2>&1 || true
  for _ in $(seq 1 50); do   # until the gateway has stopped the supervisor
    "$BIN" sandbox get demo $S >/dev/null 2>&1 || break
    sleep 0.2
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pkill -f "supervisor --spec $STATE/" 2>/dev/null || true
  for _ in $(seq 1 50); do   # until it has taken its workload down
    pgrep -f "supervisor --spec $STATE/" >/dev/null 2>&1 || break
    sleep 0.1
  done
  pkill -KILL -f "supervisor --spec $STATE/" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ -n "$OWN_RUN" ]; then rm -rf -- "$RUN"; fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

go build -o "$RUN/upstream" ./examples/upstream
"$RUN/upstream" -listen "$UPSTREAM" & pids+=($!)
"$BIN" gateway run --state-dir "$STATE" --listen "$API" --hosts examples/hosts \
  --allow-loopback-upstream --log-format json --ready-file "$RUN/gateway.ready" 2>"$RUN/gateway.log" & pids+=($!)
for _ in $(seq 1 100); do
  [ -s "$RUN/gateway.ready" ] && break
  kill -0 "${pids[1]}" 2>/dev/null || {
    cat "$RUN/gateway.log"
    echo "make run: the gateway did not start; another address: STOCKADE_LISTEN=127.0.0.1:7430 make run" >&2
    exit 1
  }
  sleep 0.1
done
kill -0 "${pids[0]}" 2>/dev/null || {
  echo "make run: the local upstream could not listen on $UPSTREAM; another port: STOCKADE_UPSTREAM_PORT=18081 make run" >&2
  exit 1
}
RELAY=$(sed -n 's/.*"relay":"\([^"]*\)".*/\1/p' "$RUN/gateway.ready")
# The example policy names the upstream's default port: follow the one used.
POLICY=examples/policy.yaml
if [ "$UPORT" != 18080 ]; then
  POLICY="$RUN/policy.yaml"
  sed "s/18080/$UPORT/g" examples/policy.yaml >"$POLICY"
fi

echo "gateway: $API (SSH relay $RELAY), state: $STATE, local upstream: $UPSTREAM"
printf '\n$ stockade sandbox create demo --policy %s -- sh -c "<loop: curl allowed, curl denied, getent unlisted>"\n' "$POLICY"
"$BIN" sandbox create demo $S --policy "$POLICY" -- /bin/sh -c '
while true; do
  echo "$(date +%T) allowed: $(curl -sS -m 5 http://api.example.test:'"$UPORT"'/from-sandbox)"
  echo "$(date +%T) denied:  $(curl -sS -m 5 http://other.example.test:'"$UPORT"'/)"
  getent hosts unlisted.example.org >/dev/null 2>&1 || echo "$(date +%T) dns: unlisted.example.org refused"
  echo "$(date +%T)" > /sandbox/heartbeat
  sleep 3
done'
sleep 4
printf '\n$ stockade sandbox get demo\n'; "$BIN" sandbox get demo $S
printf '\n$ stockade sandbox logs demo -n 3\n'; "$BIN" sandbox logs demo $S -n 3
cat <<TXT

Try next (in another shell):
  export STOCKADE_GATEWAY=$API
  export STOCKADE_CONFIG=$STATE/client.config     # the local credential (no --state-dir needed)
  stockade() { $PWD/$BIN "\$@"; }
  stockade sandbox logs demo --follow            # workload output and decisions
  stockade sandbox get demo -o json
  kill -9 \$(stockade sandbox get demo -o json | jq .supervisorPid)   # -> Error/SupervisorLost -> Ready
  stockade sandbox stop demo; stockade sandbox start demo
  ls $STATE/sandboxes/demo/workspace             # /sandbox inside
  stockade client issue alice --role operator --out /tmp/alice.config   # a credential for another user (mTLS; viewer, operator or admin)
Ctrl-C stops everything.
TXT
wait "${pids[1]}"

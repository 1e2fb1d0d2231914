#!/usr/bin/env bash
# `make run-cluster`: a cluster of three gateway nodes (n1 n2 n3) on this
# machine, on their own etcd (mutual TLS with the certificates `stockade
# cluster init` makes: only the nodes can write its keys), sharing one
# state dir, with six sample
# sandboxes (make run's workload: calls a local offline upstream through the
# sandbox's proxy every few seconds) spread over the nodes. Kill a node and
# its sandboxes move to the others within seconds; their supervisors and
# workloads keep running. Nothing leaves the machine. Ctrl-C deletes the
# sandboxes, stops the nodes (a node you restarted too), the supervisors,
# etcd and the upstream, and removes the temporary dir (etcd data, state,
# CA and the client credential).
#
# Addresses from the environment (defaults in brackets):
#   STOCKADE_ETCD_PORT          etcd's client port on 127.0.0.1 [23790];
#                               its peer port is the next one
#   STOCKADE_CLUSTER_BASE_PORT  n1's API on 127.0.0.1 [7421]; n2 and n3 the
#                               next two; each SSH relay takes a free port
#   STOCKADE_UPSTREAM_PORT      the local upstream on 127.0.0.1 [18080]
#   ETCD                        the etcd binary [etcd] (Debian: etcd-server)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/stockade}
ETCD=${ETCD:-etcd}
EPORT=${STOCKADE_ETCD_PORT:-23790}
BASE=${STOCKADE_CLUSTER_BASE_PORT:-7421}
UPORT=${STOCKADE_UPSTREAM_PORT:-18080}
NODES=(n1 n2 n3)
SANDBOXES=(demo-1 demo-2 demo-3 demo-4 demo-5 demo-6)
command -v "$ETCD" >/dev/null || {
  echo "make run-cluster: no $ETCD (Debian: apt-get install etcd-server; or ETCD=/path/to/etcd)" >&2
  exit 1
}
# Taken ports fail here, before anything starts: a health check or a ready
# file must never be answered by someone else's etcd or gateway.
taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$EPORT" $((EPORT + 1)); do
  ! taken "$p" || {
    echo "make run-cluster: 127.0.0.1:$p is taken; other etcd ports: STOCKADE_ETCD_PORT=$((EPORT + 100)) make run-cluster" >&2
    exit 1
  }
done
for i in 0 1 2; do
  ! taken $((BASE + i)) || {
    echo "make run-cluster: 127.0.0.1:$((BASE + i)) is taken; other node ports: STOCKADE_CLUSTER_BASE_PORT=$((BASE + 10)) make run-cluster" >&2
    exit 1
  }
done
! taken "$UPORT" || {
  echo "make run-cluster: 127.0.0.1:$UPORT is taken; another port: STOCKADE_UPSTREAM_PORT=$((UPORT + 1)) make run-cluster" >&2
  exit 1
}

RUN=$(mktemp -d -t stockade-run-cluster.XXXXXX)
STATE="$RUN/state" UPSTREAM=127.0.0.1:$UPORT
ETCD_URL=https://127.0.0.1:$EPORT
ETLS="$STATE/pki/etcd"   # made by cluster init below: etcd's own CA, its server and the nodes' client certificate
ALL=127.0.0.1:$BASE,127.0.0.1:$((BASE + 1)),127.0.0.1:$((BASE + 2))
S=(--state-dir "$STATE")
pids=() etcd_pid=
cleanup() {
  trap - EXIT INT TERM
  # Through any node still up, while etcd is (Ctrl-C reaches them too);
  # else the supervisors are stopped directly below.
  if [ -n "$etcd_pid" ] && kill -0 "$etcd_pid" 2>/dev/null; then
    "$BIN" sandbox delete "${SANDBOXES[@]}" "${S[@]}" --gateway "$ALL" --timeout 5s >/dev/null 2>&1 || true
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pkill -f "gateway run .*--state-dir $STATE( |$)" 2>/dev/null || true   # a node restarted by hand
  pkill -f "supervisor --spec $STATE/" 2>/dev/null || true
  for _ in $(seq 1 50); do   # until they have taken their workloads down
    pgrep -f "(supervisor --spec|gateway run .*--state-dir) $STATE" >/dev/null 2>&1 || break
    sleep 0.1
  done
  pkill -KILL -f "(supervisor --spec|gateway run .*--state-dir) $STATE" 2>/dev/null || true
  if [ -n "$etcd_pid" ]; then kill "$etcd_pid" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  rm -rf -- "$RUN"
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# Polls until "$@" succeeds; false after $1 tenths of a second.
poll() {
  local tenths=$1
  shift
  for _ in $(seq 1 "$tenths"); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

# The cluster's CA, and etcd's TLS files: whoever can write etcd's keys
# rewrites every sandbox, so etcd takes only the nodes' client certificate
# (clients and peers alike).
"$BIN" cluster init "$STATE/pki" >/dev/null
"$ETCD" --name run-cluster --data-dir "$RUN/etcd" \
  --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
  --cert-file "$ETLS/server.crt" --key-file "$ETLS/server.key" --client-cert-auth --trusted-ca-file "$ETLS/ca.crt" \
  --listen-peer-urls "https://127.0.0.1:$((EPORT + 1))" --initial-advertise-peer-urls "https://127.0.0.1:$((EPORT + 1))" \
  --peer-cert-file "$ETLS/server.crt" --peer-key-file "$ETLS/server.key" --peer-client-cert-auth --peer-trusted-ca-file "$ETLS/ca.crt" \
  --initial-cluster "run-cluster=https://127.0.0.1:$((EPORT + 1))" 2>"$RUN/etcd.log" &
etcd_pid=$!
etcd_healthy() {
  kill -0 "$etcd_pid" 2>/dev/null || {
    cat "$RUN/etcd.log" >&2
    echo "make run-cluster: etcd did not start; other ports: STOCKADE_ETCD_PORT=$((EPORT + 100)) make run-cluster" >&2
    exit 1
  }
  curl -fsS -m 1 --cacert "$ETLS/ca.crt" --cert "$ETLS/client.crt" --key "$ETLS/client.key" "$ETCD_URL/health" 2>/dev/null | grep -q '"health": *"true"'
}
poll 200 etcd_healthy || { tail -n 20 "$RUN/etcd.log" >&2; echo "make run-cluster: etcd at $ETCD_URL not healthy within 20s" >&2; exit 1; }

go build -o "$RUN/upstream" ./examples/upstream
"$RUN/upstream" -listen "$UPSTREAM" & pids+=($!)

# node_cmd I: node I's command line (also printed for a restart).
node_cmd() {
  local n=${NODES[$1]}
  cmd=("$PWD/$BIN" gateway run --etcd "$ETCD_URL" --etcd-cacert "$ETLS/ca.crt" --etcd-cert "$ETLS/client.crt" --etcd-key "$ETLS/client.key"
    --node "$n" --listen "127.0.0.1:$((BASE + $1))"
    --state-dir "$STATE" --hosts "$PWD/examples/hosts" --allow-loopback-upstream --lease-ttl 3s
    --log-format json --ready-file "$RUN/$n.ready")
}
for i in 0 1 2; do
  node_cmd "$i"
  "${cmd[@]}" 2>"$RUN/${NODES[$i]}.log" & pids+=($!)
done
for i in 0 1 2; do
  n=${NODES[$i]} p=${pids[$((i + 1))]}
  node_ready() {
    kill -0 "$p" 2>/dev/null || {
      cat "$RUN/$n.log" >&2
      echo "make run-cluster: node $n did not start; other ports: STOCKADE_CLUSTER_BASE_PORT=$((BASE + 10)) make run-cluster" >&2
      exit 1
    }
    [ -s "$RUN/$n.ready" ]
  }
  poll 200 node_ready || { tail -n 20 "$RUN/$n.log" >&2; echo "make run-cluster: node $n not ready within 20s" >&2; exit 1; }
done
kill -0 "${pids[0]}" 2>/dev/null || {
  echo "make run-cluster: the local upstream could not listen on $UPSTREAM; another port: STOCKADE_UPSTREAM_PORT=$((UPORT + 1)) make run-cluster" >&2
  exit 1
}
# The example policy names the upstream's default port: follow the one used.
POLICY=examples/policy.yaml
if [ "$UPORT" != 18080 ]; then
  POLICY="$RUN/policy.yaml"
  sed "s/18080/$UPORT/g" examples/policy.yaml >"$POLICY"
fi

echo "etcd: $ETCD_URL (mutual TLS, files in $ETLS; data: $RUN/etcd), state: $STATE, local upstream: $UPSTREAM"
for i in 0 1 2; do
  n=${NODES[$i]}
  printf 'node %s: %s (SSH relay %s), pid %s, log %s\n' "$n" "127.0.0.1:$((BASE + i))" \
    "$(sed -n 's/.*"relay":"\([^"]*\)".*/\1/p' "$RUN/$n.ready")" \
    "$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$RUN/$n.ready")" "$RUN/$n.log"
done

printf '\n$ stockade sandbox create demo-N --gateway 127.0.0.1:%s --policy %s -- sh -c "<make run'"'"'s loop>"   # N = 1..6, through n1\n' "$BASE" "$POLICY"
for sb in "${SANDBOXES[@]}"; do
  # shellcheck disable=SC2016 # the workload's shell expands its $(...)
  "$BIN" sandbox create "$sb" "${S[@]}" --gateway "127.0.0.1:$BASE" --policy "$POLICY" --timeout 60s -- /bin/sh -c '
while true; do
  echo "$(date +%T) allowed: $(curl -sS -m 5 http://api.example.test:'"$UPORT"'/from-sandbox)"
  echo "$(date +%T) denied:  $(curl -sS -m 5 http://other.example.test:'"$UPORT"'/)"
  getent hosts unlisted.example.org >/dev/null 2>&1 || echo "$(date +%T) dns: unlisted.example.org refused"
  echo "$(date +%T)" > /sandbox/heartbeat
  sleep 3
done'
done

# owners: "NAME NODE PHASE" per sandbox, from `sandbox list -o json` (jq when
# there is one, else the list's fixed layout: two-space indent, one key a line).
owners() {
  if command -v jq >/dev/null; then
    "$BIN" sandbox list -o json "${S[@]}" --gateway "$ALL" | jq -r '.[] | "\(.name) \(.node // "-") \(.phase)"'
  else
    "$BIN" sandbox list -o json "${S[@]}" --gateway "$ALL" |
      sed -nE 's/^    "(name|node|phase)": "([^"]*)".*/\1 \2/p; /^  \}/p' |
      awk '$1 == "name" { n = $2; o = "-" } $1 == "node" { o = $2 } $1 == "phase" { p = $2 } $1 ~ /^}/ { print n, o, p }'
  fi
}
all_ready() { [ "$(owners 2>/dev/null | awk '$3 == "Ready"' | wc -l)" -eq ${#SANDBOXES[@]} ]; }
poll 300 all_ready || { echo "make run-cluster: not every sandbox is Ready within 30s:" >&2; owners >&2; exit 1; }
printf '\n$ stockade sandbox list -o json | jq -r '"'"'.[] | [.name, .node, .phase] | @tsv'"'"'\n'
{ echo "SANDBOX NODE PHASE"; owners; } | awk '{ printf "%-9s %-5s %s\n", $1, $2, $3 }'

pid_of() { sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$RUN/$1.ready"; }
# Suggest killing demo-1's owner, and reaching demo-1 through another node.
victim=$(owners | awk '$1 == "demo-1" { print $2 }')
for i in 1 2 0; do [ "${NODES[$i]}" = "$victim" ] || { via=127.0.0.1:$((BASE + i)); break; }; done
restart=()
for i in 0 1 2; do
  node_cmd "$i"
  restart+=("$(printf '%q ' "${cmd[@]}")2>>$RUN/${NODES[$i]}.log &")
done
cat <<TXT

Try next (in another shell):
  export STOCKADE_CONFIG=$STATE/client.config     # the local credential; it lists every live node
  stockade() { $PWD/$BIN "\$@"; }
  STOCKADE_GATEWAY=$via stockade sandbox list -w   # a line per change (a moved sandbox: Recovering/SessionLost, Ready), through a node you keep
  watch -n1 "$PWD/$BIN sandbox list -o json | jq -r '.[] | [.name, .node, .phase] | @tsv'"   # the owners
  kill -9 $(pid_of "$victim")      # $victim, demo-1's owner: its sandboxes move to the others within ~3 s (n1 $(pid_of n1), n2 $(pid_of n2), n3 $(pid_of n3))
  STOCKADE_GATEWAY=$via stockade sandbox exec demo-1 -- hostname   # any node reaches any sandbox, wherever it moved
  stockade sandbox logs demo-1 -n 3
Restart a node you killed (the command this script ran; its sandboxes stay where they moved):
  ${restart[0]}
  ${restart[1]}
  ${restart[2]}
Ctrl-C stops everything (a node you restarted too) and removes $RUN.
TXT
wait "$etcd_pid"

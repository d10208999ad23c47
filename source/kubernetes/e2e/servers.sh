#!/usr/bin/env bash
# Build and run a real etcd + kube-apiserver on loopback for the end-to-end tests
# of source/kubernetes. Nothing is downloaded but Go modules: both binaries are
# built from the module proxy by the tools module in ./tools (about 35 minutes on
# a fresh 2-core machine, printing a line every 30 s; seconds afterwards, thanks to
# Go's build cache and the kept binaries). `make e2e` builds them and runs the tests.
#
#   servers.sh build              build (or reuse) the binaries
#   servers.sh start              build, start etcd and kube-apiserver on free
#                                 loopback ports, print `export NAME=value` lines
#   servers.sh stop-apiserver     stop the kube-apiserver at E2E_KUBE_URL (etcd and
#                                 the one at E2E_KUBE_NOCACHE_URL keep running)
#   servers.sh start-apiserver    start it again on the same etcd, port and certificates
#                                 (its watch cache starts afresh: resourceVersions
#                                 older than the restart get a genuine 410 Expired)
#   servers.sh restart-apiserver  both
#   servers.sh compact            compact etcd at its current revision
#   servers.sh stop               stop kube-apiserver(s), then etcd; remove the state
#
# start prints:
#   E2E_STATE            state directory (logs, certificates, etcd data); pass it back
#                        to the other commands in the environment
#   E2E_ETCD_ENDPOINT    http://127.0.0.1:PORT
#   E2E_KUBE_URL         https://127.0.0.1:PORT (watch cache on)
#   E2E_KUBE_NOCACHE_URL https://127.0.0.1:PORT (--watch-cache=false, same etcd)
#   E2E_KUBE_TOKEN       bearer token of a system:masters user
#   E2E_KUBE_CA          PEM file of the CA that signed the serving certificates
#   KUBECONFIG           kubeconfig for E2E_KUBE_URL
#
# Environment: E2E_BIN (binary directory, default <repo>/.cache/e2e/bin),
# E2E_PARENT_PID (start: stop the servers when that process exits, so a killed
# test binary leaves nothing behind).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
CACHE=$ROOT/.cache/e2e
BIN=${E2E_BIN:-$CACHE/bin}
K8S_VER=v1.36.3
TOKEN=e2e-token

build() {
  mkdir -p "$BIN"
  # One build at a time per binary directory: parallel test runs share it.
  exec 9>"$BIN/.lock"
  flock 9
  (
    cd "$HERE/tools"
    export GOWORK=off GOFLAGS=-mod=readonly
    # A cold build prints nothing for half an hour: say every 30 s that it goes on.
    "$ROOT/tools/heartbeat" "building etcd (from source, in $BIN)" \
      go build -o "$BIN/etcd" -ldflags "-s -w" go.etcd.io/etcd/server/v3
    "$ROOT/tools/heartbeat" "building kube-apiserver (from source, about 30 minutes cold on 2 cores)" \
      go build -o "$BIN/kube-apiserver" -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=$K8S_VER \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36" \
      k8s.io/kubernetes/cmd/kube-apiserver
  )
  exec 9>&-
}

free_port() { # a loopback port (and the one after it) nobody listens on
  # Random, below Linux's ephemeral range (32768+), where outgoing connections take
  # their local ports; a small race with other listeners is accepted.
  local p
  for _ in $(seq 1 100); do
    p=$((10000 + RANDOM % 22000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null &&
       ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 1))") 2>/dev/null; then
      echo "$p"; return 0
    fi
  done
  echo "no free port" >&2; return 1
}

wait_for() { # url pidfile name [curl args...]
  local url=$1 pidf=$2 name=$3; shift 3
  for _ in $(seq 1 1200); do
    curl -fs "$@" "$url" >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$pidf")" 2>/dev/null || { echo "$name died:" >&2; tail -30 "$STATE/$name.log" >&2; return 1; }
    sleep 0.1
  done
  echo "$name not ready after 120s" >&2; tail -30 "$STATE/$name.log" >&2; return 1
}

need_state() {
  STATE=${E2E_STATE:-}
  [ -n "$STATE" ] && [ -d "$STATE" ] || { echo "E2E_STATE is not set to a state directory" >&2; exit 2; }
  # shellcheck disable=SC1091
  . "$STATE/ports"
}

start_apiserver() { # name port [extra flags...]
  local name=$1 port=$2; shift 2
  "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$EPORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
    --cert-dir="$STATE/certs-$name" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$STATE/sa.pub" --service-account-signing-key-file="$STATE/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=RBAC --token-auth-file="$STATE/tokens.csv" \
    --disable-admission-plugins=ServiceAccount --allow-privileged=true \
    --endpoint-reconciler-type=none --shutdown-watch-termination-grace-period=1s \
    "$@" >>"$STATE/$name.log" 2>&1 &
  echo $! >"$STATE/$name.pid"
}

wait_apiserver() { # name port
  wait_for "https://127.0.0.1:$2/readyz" "$STATE/$1.pid" "$1" -k -H "Authorization: Bearer $TOKEN"
}

stop_pid() { # name
  local pid
  pid=$(cat "$STATE/$1.pid" 2>/dev/null) || return 0
  rm -f "$STATE/$1.pid"
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

start() {
  build >&2
  mkdir -p "$CACHE"
  STATE=$(mktemp -d "$CACHE/run.XXXXXX")
  # On any failure below, stop what was started and remove the state.
  trap 'stop_pid kube-apiserver; stop_pid kube-apiserver-nocache; stop_pid etcd; rm -rf "$STATE"' EXIT
  EPORT=$(free_port); KPORT=$(free_port); NPORT=$(free_port)
  printf 'EPORT=%s\nKPORT=%s\nNPORT=%s\n' "$EPORT" "$KPORT" "$NPORT" >"$STATE/ports"
  if [ -n "${E2E_PARENT_PID:-}" ]; then
    # Watchdog: stop everything once the parent process is gone.
    ( trap '' HUP
      while kill -0 "$E2E_PARENT_PID" 2>/dev/null && [ -d "$STATE" ]; do sleep 1; done
      [ -d "$STATE" ] && E2E_STATE=$STATE "$0" stop ) </dev/null >/dev/null 2>&1 &
  fi
  "$BIN/etcd" --name e2e --data-dir "$STATE/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$EPORT" --advertise-client-urls "http://127.0.0.1:$EPORT" \
    --listen-peer-urls "http://127.0.0.1:$((EPORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((EPORT + 1))" \
    --initial-cluster "e2e=http://127.0.0.1:$((EPORT + 1))" >"$STATE/etcd.log" 2>&1 &
  echo $! >"$STATE/etcd.pid"
  wait_for "http://127.0.0.1:$EPORT/health" "$STATE/etcd.pid" etcd
  openssl genrsa -out "$STATE/sa.key" 2048 2>/dev/null
  openssl rsa -in "$STATE/sa.key" -pubout -out "$STATE/sa.pub" 2>/dev/null
  echo "$TOKEN,e2e-admin,e2e-admin,system:masters" >"$STATE/tokens.csv"
  start_apiserver kube-apiserver "$KPORT"
  start_apiserver kube-apiserver-nocache "$NPORT" --watch-cache=false --feature-gates=WatchList=false
  wait_apiserver kube-apiserver "$KPORT"
  wait_apiserver kube-apiserver-nocache "$NPORT"
  # Each apiserver generated a self-signed serving certificate; trust both.
  cat "$STATE/certs-kube-apiserver/apiserver.crt" "$STATE/certs-kube-apiserver-nocache/apiserver.crt" >"$STATE/ca.crt"
  cat >"$STATE/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:$KPORT
    certificate-authority-data: $(base64 -w0 "$STATE/ca.crt")
users:
- name: e2e
  user:
    token: $TOKEN
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e}
current-context: e2e
KC
  trap - EXIT
  echo "export E2E_STATE=$STATE"
  echo "export E2E_ETCD_ENDPOINT=http://127.0.0.1:$EPORT"
  echo "export E2E_KUBE_URL=https://127.0.0.1:$KPORT"
  echo "export E2E_KUBE_NOCACHE_URL=https://127.0.0.1:$NPORT"
  echo "export E2E_KUBE_TOKEN=$TOKEN"
  echo "export E2E_KUBE_CA=$STATE/ca.crt"
  echo "export KUBECONFIG=$STATE/kubeconfig"
}

stop_apiserver() {
  need_state
  stop_pid kube-apiserver
}

start_apiserver_again() {
  need_state
  start_apiserver kube-apiserver "$KPORT"
  wait_apiserver kube-apiserver "$KPORT"
}

compact() { # prints the revision compacted at
  need_state
  local rev
  rev=$(curl -fsS -X POST "http://127.0.0.1:$EPORT/v3/kv/range" -d '{"key":"AA=="}' |
    sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p')
  [ -n "$rev" ] || { echo "cannot read the etcd revision" >&2; return 1; }
  curl -fsS -X POST "http://127.0.0.1:$EPORT/v3/kv/compaction" -d "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null
  echo "$rev"
}

stop() {
  need_state
  # Order matters: kube-apiserver keeps retrying (and never exits) if etcd goes first.
  stop_pid kube-apiserver & stop_pid kube-apiserver-nocache & wait
  stop_pid etcd
  rm -rf "$STATE"
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop-apiserver) stop_apiserver ;;
  start-apiserver) start_apiserver_again ;;
  restart-apiserver) stop_apiserver; start_apiserver_again ;;
  compact) compact ;;
  stop) stop ;;
  *) echo "usage: $0 build|start|stop-apiserver|start-apiserver|restart-apiserver|compact|stop" >&2; exit 2 ;;
esac

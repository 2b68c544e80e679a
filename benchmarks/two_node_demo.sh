#!/usr/bin/env bash
# A two-node Ray cluster on this machine (loopback only), and a CartPole run on it with a
# 2-host learner and actors on both nodes. The cluster recipe of docs/cluster.md, scripted.
#
#   benchmarks/two_node_demo.sh [extra impala-rep train flags]
#
# Both nodes are started with `ray start --block` in the background and stopped by
# signalling exactly those two processes at exit: `ray stop` would stop EVERY Ray
# instance on the machine, other people's included.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
RAY="$VENV/bin/ray"
PY="$VENV/bin/python"
WORK=$(mktemp -d /tmp/impala-two-node-XXXXXX)
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
GCS_PORT=$(free_port)
ADDRESS="127.0.0.1:$GCS_PORT"
export TF_CPP_MIN_LOG_LEVEL=2 RAY_USAGE_STATS_ENABLED=0
# Ray's token authentication, with this cluster's own token: every node and the driver
# read it from RAY_AUTH_TOKEN_PATH (a real cluster copies the file to each node).
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$WORK/auth_token"
"$PY" -c 'import secrets, sys; open(sys.argv[1], "w").write(secrets.token_hex(32))' "$RAY_AUTH_TOKEN_PATH"
chmod 600 "$RAY_AUTH_TOKEN_PATH"
# Fixed default ports would collide between two nodes on one machine (and with other Ray
# instances here): give each node its own free ones.
node_ports() { echo "--dashboard-agent-listen-port $(free_port) --metrics-export-port $(free_port) --runtime-env-agent-port $(free_port)"; }

HEAD_PID= WORKER_PID=
cleanup() {
  for pid in $WORKER_PID $HEAD_PID; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $WORKER_PID $HEAD_PID; do wait "$pid" 2>/dev/null || true; done
  echo "two_node_demo: both Ray nodes stopped; logs in $WORK"
}
trap cleanup EXIT

echo "two_node_demo: head node at $ADDRESS (temp dir $WORK/ray)"
# shellcheck disable=SC2046
"$RAY" start --head --block --node-ip-address 127.0.0.1 --port "$GCS_PORT" --num-cpus 2 \
  --include-dashboard false --ray-client-server-port "$(free_port)" $(node_ports) \
  --temp-dir "$WORK/ray" --disable-usage-stats >"$WORK/head.log" 2>&1 &
HEAD_PID=$!
for _ in $(seq 120); do
  "$RAY" status --address "$ADDRESS" >/dev/null 2>&1 && break
  sleep 1
done

echo "two_node_demo: second node joins"
# shellcheck disable=SC2046
"$RAY" start --block --address "$ADDRESS" --node-ip-address 127.0.0.1 --num-cpus 2 \
  --resources '{"second_node": 1}' $(node_ports) --disable-usage-stats >"$WORK/worker.log" 2>&1 &
WORKER_PID=$!
for _ in $(seq 120); do
  [ "$("$PY" - "$ADDRESS" <<'EOF' 2>/dev/null
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", _node_ip_address="127.0.0.1")
print(sum(1 for n in ray.nodes() if n["Alive"]))
EOF
)" = "2" ] && break
  sleep 1
done
"$RAY" status --address "$ADDRESS" | sed -n '/Node status/,/Pending/p'

echo "two_node_demo: training CartPole, 2 learner hosts x cpu, 2 actors, logdir $WORK/run"
start=$(date +%s)
RAY_ADDRESS="$ADDRESS" "$VENV/bin/impala-rep" train --ray-address "$ADDRESS" --learner-hosts 2 \
  --num-actors 2 --learner-devices cpu --total-frames 300000 \
  --logdir "$WORK/run" "$@" 2>"$WORK/train.stderr" | tr '\r' '\n'
echo "two_node_demo: train exited after $(( $(date +%s) - start )) s"

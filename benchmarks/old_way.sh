#!/usr/bin/env bash
# The old way, as the seed's operator launched by hand: the launch steps with the docker CLI over
# ssh, then `sleep 30; tail -30` of the server's log until "Application startup complete" (or an
# error shows in the tail), then a health poll. Driven by benchmarks/old_way.py; prints one line
# per thing it learned: `EVENT <what> <unix time> [detail]`.
#
# Settings (environment; defaults are the lab's): HEADS/WORKER ssh names in $SSH_CONFIG,
# HEAD_SOCK/WORKER_SOCK (each lab node's Docker engine has its own socket), HEAD_IP/WORKER_IP
# (fabric), API (the head's API as this machine reaches it), IMAGE, NAME, POLL (the sleep between
# two looks at the log), EMU_ENV (space-separated NAME=VALUE for the emulator: profile, time
# scale, fault).
set -u

SSH_CONFIG=${SSH_CONFIG:-/var/lib/spark-lab/ssh/config}
HEAD=${HEAD:-spark-lab-0}
WORKER=${WORKER:-spark-lab-1}
HEAD_SOCK=${HEAD_SOCK:-/run/spark-lab/node0/docker.sock}
WORKER_SOCK=${WORKER_SOCK:-/run/spark-lab/node1/docker.sock}
HEAD_IP=${HEAD_IP:-198.18.1.10}
WORKER_IP=${WORKER_IP:-198.18.1.11}
API=${API:-http://198.18.0.10:8000}
IMAGE=${IMAGE:-spark-lab/vllm-emu:latest}
NAME=${NAME:-vllm_oldway}
POLL=${POLL:-30}
EMU_ENV=${EMU_ENV:-}
MODEL=${MODEL:-Qwen/Qwen3.5-122B-A10B-FP8}

event() { echo "EVENT $1 $(date +%s.%N) ${2:-}"; }
# ssh hands the remote shell one string: each word is quoted for it
on() {
  local host=$1 sock=$2; shift 2
  ssh -F "$SSH_CONFIG" "$host" "$(printf '%q ' docker -H "unix://$sock" "$@")"
}

run_flags() {
  local ip=$1
  echo --detach --name "$NAME" --network host --init --cap-add IPC_LOCK --shm-size 64m \
    --ulimit nofile=16384:16384 \
    -e VLLM_HOST_IP="$ip" -e RAY_NODE_IP_ADDRESS="$ip" -e RAY_OVERRIDE_NODE_IP_ADDRESS="$ip" \
    -e NCCL_SOCKET_IFNAME=enp1s0f1np1 -e GLOO_SOCKET_IFNAME=enp1s0f1np1 \
    -e NCCL_IB_HCA=rocep1s0f1 -e NCCL_DEBUG=INFO
  for kv in $EMU_ENV; do printf -- '-e %s ' "$kv"; done
}

cleanup() {
  on "$HEAD" "$HEAD_SOCK" rm -f "$NAME" >/dev/null 2>&1
  on "$WORKER" "$WORKER_SOCK" rm -f "$NAME" >/dev/null 2>&1
}
trap cleanup EXIT
cleanup

event start
# shellcheck disable=SC2046  # the flags are words on purpose
on "$HEAD" "$HEAD_SOCK" run $(run_flags "$HEAD_IP") "$IMAGE" \
  ray start --block --head --port 6379 --node-ip-address "$HEAD_IP" >/dev/null || exit 2
# shellcheck disable=SC2046
on "$WORKER" "$WORKER_SOCK" run $(run_flags "$WORKER_IP") "$IMAGE" \
  ray start --block --address "$HEAD_IP:6379" --node-ip-address "$WORKER_IP" >/dev/null || exit 2
until [ "$(on "$HEAD" "$HEAD_SOCK" exec "$NAME" ray status 2>/dev/null | grep -c ' node_')" -ge 2 ]; do
  sleep 2
done
event ray_ready
# The server's output goes to a file as with `nohup ./launch.sh > log`; it is also copied to the
# container's log so that the benchmark can read when each line was written.
on "$HEAD" "$HEAD_SOCK" exec --detach "$NAME" sh -c \
  "vllm serve $MODEL --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 \
   --distributed-executor-backend ray --served-model-name qwen35 --max-model-len 32768 \
   2>&1 | tee /tmp/vllm.log >/proc/1/fd/1"
event serve_started

while true; do
  sleep "$POLL"
  tail=$(on "$HEAD" "$HEAD_SOCK" exec "$NAME" tail -30 /tmp/vllm.log 2>&1)
  if grep -q "Application startup complete" <<<"$tail"; then
    event startup_seen
    break
  fi
  if grep -qE "Error|Traceback" <<<"$tail"; then
    event failed "$(grep -E 'Error' <<<"$tail" | tail -1)"
    exit 1
  fi
done
until curl -sf "$API/health" >/dev/null; do sleep 1; done
event ready

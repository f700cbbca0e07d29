#!/bin/bash
# launch-pair.sh: a launch script for a pair of Sparks, written for spark-bot's lab tests the way
# the community's are (eugr/spark-vllm-docker's launch-cluster.sh, vLLM's
# examples/online_serving/run_cluster.sh): run on the head, it starts a container per node that
# only sleeps (the worker's over `ssh <worker fabric IP>`), Ray's head and worker inside them
# through `docker exec`, checks `ray status` after a `sleep`, then `vllm serve` through
# `docker exec`: in the foreground (its lines are this script's output) or, with -d, detached
# with its output in the container's log, after which the script shows a `tail` and exits 0.
#
#   launch-pair.sh --worker IP [-t IMAGE] [--name NAME] [-e VAR=value]... [-v SRC:DST]...
#                  [--worker-docker-host unix:///PATH] [--rm] [-d] -- MODEL [vllm serve flags]...
#
# --worker-docker-host drives the worker's Docker engine through its socket instead of ssh.
# --rm runs the containers with `docker run --rm`, as launch-cluster.sh does: Docker removes
# each as it stops.
set -euo pipefail

IMAGE="vllm-node"
NAME="vllm_node"
WORKER_IP=""
WORKER_DOCKER_HOST=""
RAY_PORT=6379
DETACH=false
DOCKER_ARGS=()

usage() {
    echo "Usage: $0 --worker IP [-t image] [--name name] [-e VAR=value] [-v src:dst] [--rm] [-d] -- MODEL [vllm serve flags]"
    exit 1
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --worker) WORKER_IP="$2"; shift ;;
        --worker-docker-host) WORKER_DOCKER_HOST="$2"; shift ;;
        -t) IMAGE="$2"; shift ;;
        --name) NAME="$2"; shift ;;
        -e|--env) DOCKER_ARGS+=(-e "$2"); shift ;;
        -v|--volume) DOCKER_ARGS+=(-v "$2"); shift ;;
        --rm) DOCKER_ARGS+=(--rm) ;;
        -d) DETACH=true ;;
        --) shift; break ;;
        *) echo "Error: Unknown argument: $1"; usage ;;
    esac
    shift
done
[[ -n "$WORKER_IP" ]] || { echo "Error: --worker is required"; usage; }
[[ $# -gt 0 ]] || { echo "Error: nothing to serve: give the model and its flags after --"; usage; }

# This node's fabric address and interfaces, found the way the community launcher finds them.
HEAD_IP=$(ip -o -4 route get "$WORKER_IP" | sed -n 's/.* src \([0-9.]*\).*/\1/p')
ETH_IF=$(ip -o -4 addr show | awk -v ip="$HEAD_IP" '{split($4, a, "/")} a[1] == ip {print $2}')
IB_IF=$(ibdev2netdev | awk '/\(Up\)/ {print $1}' | paste -sd, -)
echo "Detected head IP: $HEAD_IP, ETH_IF: $ETH_IF, IB_IF: $IB_IF, worker: $WORKER_IP"

worker_docker() {
    if [[ -n "$WORKER_DOCKER_HOST" ]]; then
        DOCKER_HOST="$WORKER_DOCKER_HOST" docker "$@"
    else
        ssh -o BatchMode=yes "$WORKER_IP" docker "$@"
    fi
}

container_args() {  # the node's IP
    echo --name "$NAME" --network host --init --gpus all --shm-size 64m --cap-add IPC_LOCK \
        --ulimit nofile=16384:16384 -e "VLLM_HOST_IP=$1" -e "NCCL_SOCKET_IFNAME=$ETH_IF" \
        -e "GLOO_SOCKET_IFNAME=$ETH_IF" -e "NCCL_IB_HCA=$IB_IF"
}

echo "Starting container $NAME on the head ($HEAD_IP)"
# shellcheck disable=SC2046
docker run -d $(container_args "$HEAD_IP") "${DOCKER_ARGS[@]}" --entrypoint sleep "$IMAGE" infinity
echo "Starting container $NAME on the worker ($WORKER_IP)"
# shellcheck disable=SC2046
worker_docker run -d $(container_args "$WORKER_IP") "${DOCKER_ARGS[@]}" --entrypoint sleep "$IMAGE" infinity

echo "Starting the Ray head"
docker exec "$NAME" ray start --head --port "$RAY_PORT" --node-ip-address "$HEAD_IP"
sleep 1
echo "Starting the Ray worker"
worker_docker exec "$NAME" ray start "--address=$HEAD_IP:$RAY_PORT" --node-ip-address "$WORKER_IP"
sleep 1
docker exec "$NAME" ray status | tail -n 12

echo "Starting vllm serve $*"
if $DETACH; then
    docker exec -d "$NAME" sh -c 'exec vllm serve "$@" >/proc/1/fd/1 2>/proc/1/fd/2' sh "$@" \
        --distributed-executor-backend ray
    sleep 1
    docker logs --tail 5 "$NAME"
    echo "vLLM is starting in the background: docker logs -f $NAME"
else
    exec docker exec "$NAME" vllm serve "$@" --distributed-executor-backend ray
fi

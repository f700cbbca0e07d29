#!/bin/sh
# Bootstrap a fresh Debian 12 machine for spark-bot (run as root; idempotent).
# Section "system packages" is the lab's (Docker engine, sshd, debootstrap, netns tools);
# it installs only when something is missing. Other sections may follow.
set -eu

if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap.sh: run as root (sudo $0)" >&2
    exit 2
fi

# --- system packages (lab) ---------------------------------------------------
# docker-compose: tests/deploy starts compose.yaml with it; systemd: systemd-analyze checks the unit;
# rsync, netcat-openbsd, sudo: tools the operators' launch scripts run on a Spark (the lab's
# nodes are namespaces of this machine, so their sessions run this machine's)
LAB_PACKAGES="docker.io openssh-server openssh-client debootstrap iptables iproute2 util-linux docker-compose systemd rsync netcat-openbsd sudo"
missing=""
need() {  # need <command> <package>
    PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" command -v "$1" >/dev/null 2>&1 || missing="$missing $2"
}
need dockerd docker.io
need docker docker.io
need sshd openssh-server
need ssh openssh-client
need ssh-keygen openssh-client
need debootstrap debootstrap
need iptables iptables
need ip iproute2
need nsenter util-linux
need setsid util-linux
need docker-compose docker-compose
need systemd-analyze systemd
need unshare util-linux
need rsync rsync
need nc netcat-openbsd
need sudo sudo
# the lab's real engine is a venv of Debian's python3 (the node image's Python)
/usr/bin/python3 -c "import ensurepip, venv" 2>/dev/null || missing="$missing python3-venv"
if [ -n "$missing" ]; then
    echo "bootstrap.sh: installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends $LAB_PACKAGES python3-venv
else
    echo "bootstrap.sh: system packages present"
fi
# sshd needs its privilege-separation dir; the lab's sshds do not use the system service
mkdir -p /run/sshd

# --- Python environment --------------------------------------------------------
sh "$(dirname "$0")/python-env.sh"

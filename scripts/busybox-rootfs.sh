#!/usr/bin/env bash
# Builds a minimal container rootfs from a static busybox: enough for `sh`, `sleep`,
# `nc` and friends. Used by `tranche bench preempt --image DIR` and for trying the
# OCI executor without an image registry.
#   scripts/busybox-rootfs.sh DIR     (installs busybox-static with apt-get when missing, as root)
set -euo pipefail
dir=${1:?usage: busybox-rootfs.sh DIR}
bb=$(command -v busybox || true)
if [[ -z $bb ]] || ! file -L "$bb" 2>/dev/null | grep -q static; then
  if [[ $(id -u) -eq 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
    bb=$(command -v busybox)
  else
    echo "busybox-rootfs.sh: a static busybox is needed (apt-get install busybox-static, as root)" >&2
    exit 2
  fi
fi
mkdir -p "$dir"/{bin,etc,tmp,proc,sys,dev,root}
cp "$bb" "$dir/bin/busybox"
for a in $("$bb" --list); do
  [[ $a == busybox ]] || ln -sf busybox "$dir/bin/$a"
done
echo "$dir"

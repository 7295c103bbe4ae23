#!/usr/bin/env bash
# Builds Tranche and installs it on this node:
#   scripts/install.sh controller   # tranched + tranche, unit, /etc/tranche/controller.toml
#   scripts/install.sh agent        # tranche-agent + tranche, unit, /etc/tranche/agent.toml
# Existing configs are kept; the examples land beside them as *.example. Needs root for
# the install step. Set PREFIX (default /usr/local) to install elsewhere.
set -euo pipefail
role=${1:?usage: install.sh controller|agent}
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${PREFIX:-/usr/local}
case $role in
  controller) bins=(tranched tranche); unit=tranched.service; cfg=controller.toml ;;
  agent) bins=(tranche-agent tranche); unit=tranche-agent.service; cfg=agent.toml ;;
  *) echo "install.sh: role must be controller or agent, not '$role'" >&2; exit 2 ;;
esac
(cd "$root" && cargo build --release --workspace)
if [[ $(id -u) -ne 0 ]]; then
  echo "install.sh: built; run again as root to install" >&2
  exit 1
fi
for b in "${bins[@]}"; do
  install -m 0755 "$root/target/release/$b" "$prefix/bin/$b"
done
install -d -m 0755 /etc/tranche /etc/tranche/certs
if [[ -e /etc/tranche/$cfg ]]; then
  install -m 0644 "$root/config/$cfg" "/etc/tranche/$cfg.example"
else
  install -m 0644 "$root/config/$cfg" "/etc/tranche/$cfg"
fi
sed "s#/usr/bin/#$prefix/bin/#" "$root/systemd/$unit" > "/etc/systemd/system/$unit"
if [[ $role == controller ]] && ! id tranche >/dev/null 2>&1; then
  useradd --system --home /var/lib/tranche --shell /usr/sbin/nologin tranche
fi
systemctl daemon-reload 2>/dev/null || true
echo "installed ${bins[*]} to $prefix/bin and $unit; edit /etc/tranche/$cfg, put the"
echo "certificates in /etc/tranche/certs (tranche certs issue ...), then: systemctl enable --now $unit"

#!/usr/bin/env bash
# Installs the Debian packages on this machine and removes them again, checking what
# each step leaves:
#
#   scripts/package-test.sh [DEB_DIR]   (default: build them with scripts/package.sh)
#
# As root: `dpkg -i` of tranche, tranche-agent and tranched (in that order, as on a
# host that is both agent and controller); the files, owners and modes, the conffiles,
# the tranche system user; that the binaries run; that tranched refuses the shipped
# example config, naming the missing certificate, and leaves its data dir empty; that
# the daemons start from the packages' layout and a node registers
# (scripts/package-smoke.py); `systemd-analyze verify` of the installed units; an
# upgrade (the same packages repacked under a higher version) that keeps an edited
# conffile, the data and the user; then `dpkg -r` (config and data kept) and `dpkg -P`
# (config and data gone, the user kept as Debian does). Whatever happens, the machine
# is left as it was found (a trap purges the packages and removes the user if this run
# made it), and that is checked at the end.
#
# Exit status: 0 passed, 1 failed, 77 not run (not root, no dpkg, or Tranche already
# installed here, which this test would change), saying why.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkgs=(tranche tranche-agent tranched)

not_run() {
  echo "package-test: NOT RUN: $*" >&2
  exit 77
}
[[ $(id -u) -eq 0 ]] || not_run "needs root (dpkg -i, adduser)"
command -v dpkg >/dev/null 2>&1 || not_run "no dpkg on this machine"
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) || true
  if [[ -n $status && $status != not-installed ]]; then
    not_run "package $p is on this machine ($status); the test would replace it"
  fi
done
for d in /etc/tranche /var/lib/tranche /var/spool/tranche /var/spool/tranche.work; do
  [[ ! -e $d ]] || not_run "$d exists (an installed Tranche?); the test would change it"
done
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "package-test: installing systemd (apt-get) for systemd-analyze verify" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
fi

# What the packages touch, with owners and modes: the same before and after.
snapshot() {
  local p
  {
    for p in /usr/bin/tranche /usr/bin/tranched /usr/bin/tranche-agent \
      /usr/lib/systemd/system/tranched.service /usr/lib/systemd/system/tranche-agent.service \
      /etc/tranche /var/lib/tranche /var/spool/tranche /var/spool/tranche.work \
      /usr/share/doc/tranche /usr/share/doc/tranched /usr/share/doc/tranche-agent; do
      if [[ -e $p || -L $p ]]; then find "$p" -printf '%p %u %g %m\n'; fi
    done
    find /var/lib/systemd /etc/systemd/system /var/lib/dpkg/info -name '*tranche*' 2>/dev/null
    getent passwd tranche || true
    getent group tranche || true
  } | sort
}
before=$(snapshot)
had_user=0
getent passwd tranche >/dev/null && had_user=1
work=$(mktemp -d /tmp/tranche-package-test.XXXXXX)
failed=0

# Daemons the smoke run started, if it was stopped before it could stop them.
stop_smoke() {
  local pid
  if [[ -f $work/smoke/pids ]]; then
    while read -r pid; do kill -KILL "$pid" 2>/dev/null || true; done <"$work/smoke/pids"
    rm -f "$work/smoke/pids"
  fi
}

cleanup() {
  local rc=$? p after
  stop_smoke
  for p in tranched tranche-agent tranche; do
    if dpkg-query -W "$p" >/dev/null 2>&1; then dpkg -P "$p" >/dev/null 2>&1 || rc=1; fi
  done
  if [[ $had_user == 0 ]]; then
    if getent passwd tranche >/dev/null; then userdel tranche || rc=1; fi
    if getent group tranche >/dev/null; then groupdel tranche || rc=1; fi
  fi
  rm -rf "$work"
  after=$(snapshot)
  if [[ $after != "$before" ]]; then
    echo "package-test: FAIL: the machine is not as it was; before vs after:" >&2
    diff <(echo "$before") <(echo "$after") >&2 || true
    rc=1
  else
    echo "package-test: the machine is as it was" >&2
  fi
  ((rc == 0)) && echo "package-test: passed" >&2 || echo "package-test: FAILED" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ok() { echo "  ok: $*"; }
fail() {
  echo "  FAIL: $*" >&2
  failed=1
}
# expect_stat PATH "OWNER GROUP MODE"
expect_stat() {
  local got
  got=$(stat -c '%U %G %a' "$1" 2>/dev/null || echo missing)
  if [[ $got == "$2" ]]; then ok "$1: $got"; else fail "$1: $got, expected $2"; fi
}
# expect_gone PATH
expect_gone() {
  if [[ -e $1 ]]; then fail "$1 is still there"; else ok "$1 is gone"; fi
}

if (($#)); then
  debdir=$1
else
  debdir=$work/debs
  "$root/scripts/package.sh" "$debdir" >/dev/null
fi
declare -A deb
for p in "${pkgs[@]}"; do
  found=$(compgen -G "$debdir/${p}_*.deb" | sort -V | tail -1) || true
  [[ -n $found ]] || { echo "package-test: FAIL: no ${p}_*.deb in $debdir" >&2; exit 1; }
  deb[$p]=$found
done

echo "package-test: dpkg -i (tranche, tranche-agent, tranched)"
for p in "${pkgs[@]}"; do
  dpkg -i "${deb[$p]}" >"$work/dpkg-i-$p.log" 2>&1 \
    || { cat "$work/dpkg-i-$p.log" >&2; fail "dpkg -i $p"; exit 1; }
  # As on a GPU node, before tranched joins it: the agent's key is root's alone.
  if [[ $p == tranche-agent ]]; then expect_stat /etc/tranche/certs "root root 700"; fi
done

echo "package-test: files, owners and modes"
for b in tranche tranched tranche-agent; do expect_stat "/usr/bin/$b" "root root 755"; done
expect_stat /etc/tranche/controller.toml "root root 644"
expect_stat /etc/tranche/agent.toml "root root 644"
cmp -s /etc/tranche/controller.toml "$root/config/controller.toml" \
  && ok "controller.toml is config/controller.toml" || fail "controller.toml differs from config/controller.toml"
cmp -s /etc/tranche/agent.toml "$root/config/agent.toml" \
  && ok "agent.toml is config/agent.toml" || fail "agent.toml differs from config/agent.toml"
expect_stat /usr/lib/systemd/system/tranched.service "root root 644"
expect_stat /usr/lib/systemd/system/tranche-agent.service "root root 644"
expect_stat /var/lib/tranche "tranche tranche 700"
expect_stat /var/spool/tranche "root root 700"
# The agent's package made it 0700 root; the controller's gave its group the key.
expect_stat /etc/tranche/certs "root tranche 750"

echo "package-test: conffiles"
for pair in tranched:/etc/tranche/controller.toml tranche-agent:/etc/tranche/agent.toml; do
  if dpkg-query -W -f='${Conffiles}\n' "${pair%%:*}" | grep -q "^ ${pair#*:} "; then
    ok "${pair#*:} is a conffile of ${pair%%:*}"
  else
    fail "${pair#*:} is not a conffile of ${pair%%:*}"
  fi
done

echo "package-test: the tranche system user"
IFS=: read -r _ _ uid gid _ home shell < <(getent passwd tranche) || true
if [[ -n ${uid:-} ]] && ((uid < 1000)); then ok "tranche is a system user (uid $uid)"; else fail "tranche: uid '${uid:-none}'"; fi
[[ ${home:-} == /var/lib/tranche ]] && ok "home /var/lib/tranche" || fail "tranche's home is '${home:-}'"
[[ ${shell:-} == /usr/sbin/nologin ]] && ok "shell /usr/sbin/nologin" || fail "tranche's shell is '${shell:-}'"
[[ $(getent group tranche | cut -d: -f3) == "${gid:-x}" ]] && ok "group tranche is its primary group" \
  || fail "tranche's primary group is not tranche"

echo "package-test: the binaries run"
v=$(/usr/bin/tranche --version 2>&1) && ok "tranche --version: $v" || fail "tranche --version: $v"
/usr/bin/tranched --help >/dev/null 2>&1 && ok "tranched --help" || fail "tranched --help"
/usr/bin/tranche-agent --help >/dev/null 2>&1 && ok "tranche-agent --help" || fail "tranche-agent --help"
# The shipped config names certificates an admin has yet to install: the controller
# refuses it, naming the file (as the tranche user, like its unit).
set +e
msg=$(umask 0077 && setpriv --reuid=tranche --regid=tranche --clear-groups \
  /usr/bin/tranched --config /etc/tranche/controller.toml 2>&1 </dev/null)
rc=$?
set -e
if ((rc != 0)) && grep -q 'cannot read certificate /etc/tranche/certs/' <<<"$msg"; then
  ok "tranched refuses the unedited config (exit $rc): ${msg##*ERROR }"
else
  fail "tranched with the unedited config: exit $rc: $msg"
fi
# ... and leaves the data dir empty: the founding members of a data dir are read once.
left=$(ls -A /var/lib/tranche)
[[ -z $left ]] && ok "/var/lib/tranche is still empty" || fail "the refused start left in /var/lib/tranche: $left"

echo "package-test: the daemons start from the packages' layout"
# The tranche user reaches its config in the smoke run's directory, and lists nothing.
chmod 0711 "$work"
mkdir -m 0711 "$work/smoke"
python3 "$root/scripts/package-smoke.py" "$work/smoke" \
  || fail "the installed daemons did not all start and stop cleanly (above)"
stop_smoke

echo "package-test: systemd-analyze verify"
# verify exits 0 on an unknown key ("Unknown key 'ProtectSystm' ..., ignoring"): any
# word from it is a failure.
if out=$(systemd-analyze verify /usr/lib/systemd/system/tranched.service \
  /usr/lib/systemd/system/tranche-agent.service 2>&1) && [[ -z $out ]]; then
  ok "both units verify, without a warning"
else
  fail "systemd-analyze verify: $out"
fi

echo "package-test: an upgrade keeps the edited config, the data and the user"
# The same packages under a higher version (repacked with dpkg-deb), as a new release.
uid_before=$(id -u tranche)
echo "# edited by the admin" >>/etc/tranche/controller.toml
for p in tranched tranche-agent; do
  rm -rf "$work/repack"
  dpkg-deb -R "${deb[$p]}" "$work/repack"
  sed -i 's/^Version: \(.*\)$/Version: \1.1/' "$work/repack/DEBIAN/control"
  new=$(sed -n 's/^Version: //p' "$work/repack/DEBIAN/control")
  dpkg-deb -b --root-owner-group "$work/repack" "$work/$p-upgrade.deb" >/dev/null
  if dpkg -i "$work/$p-upgrade.deb" >"$work/dpkg-upgrade-$p.log" 2>&1 \
    && [[ $(dpkg-query -W -f='${Version}' "$p") == "$new" ]]; then
    ok "$p upgraded to $new"
  else
    cat "$work/dpkg-upgrade-$p.log" >&2
    fail "dpkg -i of $p $new"
  fi
done
[[ $(tail -1 /etc/tranche/controller.toml) == "# edited by the admin" ]] \
  && ok "the edited controller.toml is kept" || fail "the upgrade replaced the edited controller.toml"
left=$(compgen -G '/etc/tranche/*.dpkg-*') || true
[[ -z $left ]] && ok "no .dpkg-dist or .dpkg-old beside it" || fail "the upgrade left $left"
expect_stat /var/lib/tranche "tranche tranche 700"
expect_stat /var/lib/tranche/controller/raft.redb "tranche tranche 600"
expect_stat /var/spool/tranche "root root 700"
[[ $(id -u tranche) == "$uid_before" ]] && ok "user tranche kept (uid $uid_before)" \
  || fail "user tranche's uid changed from $uid_before to $(id -u tranche)"

echo "package-test: dpkg -r keeps config and data"
echo "data" >/var/lib/tranche/marker
echo "spool" >/var/spool/tranche/marker
install -m 0600 /dev/null /etc/tranche/certs/ca.pem
for p in tranched tranche-agent tranche; do dpkg -r "$p" >"$work/dpkg-r-$p.log" 2>&1 || fail "dpkg -r $p"; done
for b in tranche tranched tranche-agent; do expect_gone "/usr/bin/$b"; done
expect_gone /usr/lib/systemd/system/tranched.service
expect_stat /etc/tranche/controller.toml "root root 644"
expect_stat /etc/tranche/agent.toml "root root 644"
expect_stat /var/lib/tranche/marker "root root 644"
expect_stat /var/lib/tranche/controller/raft.redb "tranche tranche 600"
expect_stat /var/spool/tranche/marker "root root 644"
getent passwd tranche >/dev/null && ok "user tranche kept" || fail "user tranche removed by dpkg -r"

echo "package-test: dpkg -P removes config and data"
for p in tranched tranche-agent tranche; do dpkg -P "$p" >"$work/dpkg-P-$p.log" 2>&1 || fail "dpkg -P $p"; done
expect_gone /etc/tranche/controller.toml
expect_gone /etc/tranche/agent.toml
expect_gone /var/lib/tranche
expect_gone /var/spool/tranche
# Certificates an admin put there stay; so does the system user, as Debian leaves them.
expect_stat /etc/tranche/certs/ca.pem "root root 600"
getent passwd tranche >/dev/null && ok "user tranche kept" || fail "user tranche removed by dpkg -P"
rm -r /etc/tranche

((failed == 0)) || exit 1

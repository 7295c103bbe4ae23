#!/usr/bin/env python3
"""Starts the installed Tranche packages as their units would, on this machine.

    scripts/package-smoke.py WORK_DIR

Run by scripts/package-test.sh, as root, once tranche, tranched and tranche-agent are
installed. It issues a CA and certificates with the installed `tranche`, puts them
into /etc/tranche/certs with the owners and modes docs/operations/packages.md gives,
and starts a one-controller cluster from the packages' layout: /usr/bin/tranched as
the `tranche` user with umask 0077 and its data in /var/lib/tranche/controller, and
/usr/bin/tranche-agent as root with its spool in /var/spool/tranche (the fake GPU
inventory). Each daemon gets its ports as sockets this script bound on port 0 (read
back, then handed over with TRANCHE_LISTEN_FDS) and says READY=1 on a notify socket
of its own, as under systemd's Type=notify. Then `tranche nodes` must list the node
idle, the data dir must be the tranche user's and 0700, and both daemons must stop
with status 0 on SIGTERM.

The configs are written to WORK_DIR (the packaged ones stay as shipped). The pids of
the daemons are written to WORK_DIR/pids while they run, so that the caller can stop
them if this script is killed. Exit status: 0 when every check passed, 1 otherwise.
"""

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time

WORK = sys.argv[1]
CERTS = "/etc/tranche/certs"
READY_TIMEOUT_S = 60
failed = False


def ok(what):
    print(f"  ok: {what}", flush=True)


def fail(what):
    global failed
    failed = True
    print(f"  FAIL: {what}", file=sys.stderr, flush=True)


def tranche(*args):
    return subprocess.run(["/usr/bin/tranche", *args], check=True, capture_output=True, text=True)


def install(src, dst, mode, owner="root"):
    shutil.copyfile(src, dst)
    pw = pwd.getpwnam(owner)
    os.chown(dst, pw.pw_uid, pw.pw_gid)
    os.chmod(dst, mode)


def udp_port0():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.set_inheritable(True)
    return s, f"127.0.0.1:{s.getsockname()[1]}"


def notify_socket(name):
    path = os.path.join(WORK, name)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    os.chmod(path, 0o666)  # the controller sends as the tranche user
    return s, path


def wait_ready(name, proc, sock):
    """Waits for READY=1 from proc on sock; False when it exits or the time runs out."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(f"{name} exited with status {proc.returncode} before it was ready")
            return False
        try:
            if b"READY=1" in sock.recv(4096).split(b"\n"):
                ok(f"{name} is ready (READY=1)")
                return True
        except socket.timeout:
            pass
    fail(f"{name} did not say READY=1 within {READY_TIMEOUT_S} s")
    return False


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def main():
    os.chmod(WORK, 0o711)  # the tranche user reaches its config below, lists nothing
    ca = os.path.join(WORK, "ca")
    tranche("certs", "init", "--dir", ca, "--cluster", "pkgtest")
    tranche("certs", "issue", "--dir", ca, "--role", "controller", "--name", "ctl1", "--host", "127.0.0.1")
    tranche("certs", "issue", "--dir", ca, "--role", "agent", "--name", "gpu01")
    tranche("certs", "issue", "--dir", ca, "--role", "admin", "--name", "root")
    install(f"{ca}/ca.pem", f"{CERTS}/ca.pem", 0o644)
    install(f"{ca}/controller-ctl1.pem", f"{CERTS}/controller-ctl1.pem", 0o644)
    install(f"{ca}/controller-ctl1.key", f"{CERTS}/controller-ctl1.key", 0o600, "tranche")
    install(f"{ca}/agent-gpu01.pem", f"{CERTS}/agent-gpu01.pem", 0o644)
    install(f"{ca}/agent-gpu01.key", f"{CERTS}/agent-gpu01.key", 0o600)

    peer, peer_addr = udp_port0()
    client, client_addr = udp_port0()
    logs, logs_addr = udp_port0()
    etc = os.path.join(WORK, "etc")
    os.mkdir(etc, 0o755)
    tls = f"""[tls]
ca = "{CERTS}/ca.pem"
cert = "{CERTS}/{{role}}.pem"
key = "{CERTS}/{{role}}.key"
"""
    write(f"{etc}/controller.toml", f"""id = 1
name = "ctl1"
peer_addr = "{peer_addr}"
client_addr = "{client_addr}"
data_dir = "/var/lib/tranche/controller"
{tls.format(role="controller-ctl1")}
[[peers]]
id = 1
name = "ctl1"
peer_addr = "{peer_addr}"
client_addr = "{client_addr}"
""")
    write(f"{etc}/agent.toml", f"""node = "gpu01"
controllers = ["{client_addr}"]
spool_dir = "/var/spool/tranche"
inventory = "fake"
fake = "2 x h100"
logs_addr = "{logs_addr}"
{tls.format(role="agent-gpu01")}
""")
    write(f"{WORK}/admin.toml", f"""controllers = ["{client_addr}"]
[tls]
ca = "{ca}/ca.pem"
cert = "{ca}/admin-root.pem"
key = "{ca}/admin-root.key"
""", 0o600)

    procs = {}
    base_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

    def start(name, cmd, socks, **kw):
        nsock, npath = notify_socket(f"notify-{name}")
        fds = [s.fileno() for s in socks]
        env = dict(base_env, NOTIFY_SOCKET=npath, TRANCHE_LISTEN_FDS=",".join(map(str, fds)))
        log = open(os.path.join(WORK, f"{name}.log"), "w")
        p = subprocess.Popen(cmd, env=env, pass_fds=fds, stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT, umask=0o077, **kw)
        procs[name] = p
        with open(os.path.join(WORK, "pids"), "a") as f:
            f.write(f"{p.pid}\n")
        ready = wait_ready(name, p, nsock)
        if not ready:
            with open(os.path.join(WORK, f"{name}.log")) as f:
                print(f.read()[-4000:], file=sys.stderr)
        return ready

    try:
        # As tranched.service: User=tranche, Group=tranche, UMask=0077.
        if start("tranched", ["/usr/bin/tranched", "--config", f"{etc}/controller.toml"],
                 [peer, client], user="tranche", group="tranche", extra_groups=[]):
            st = os.stat("/var/lib/tranche/controller")
            got = (pwd.getpwuid(st.st_uid).pw_name, oct(st.st_mode & 0o7777))
            if got == ("tranche", "0o700") and os.path.exists("/var/lib/tranche/controller/raft.redb"):
                ok("/var/lib/tranche/controller: tranche 0700, with raft.redb")
            else:
                fail(f"/var/lib/tranche/controller: {got}")
            # As tranche-agent.service: root, UMask=0077.
            if start("tranche-agent", ["/usr/bin/tranche-agent", "run", "--config", f"{etc}/agent.toml"], [logs]):
                deadline = time.monotonic() + 30
                out = ""
                while time.monotonic() < deadline:
                    r = subprocess.run(["/usr/bin/tranche", "nodes", "--config", f"{WORK}/admin.toml"],
                                       capture_output=True, text=True)
                    out = r.stdout + r.stderr
                    if any(l.split()[:2] == ["gpu01", "idle"] for l in out.splitlines()):
                        break
                    time.sleep(0.5)
                if any(l.split()[:2] == ["gpu01", "idle"] for l in out.splitlines()):
                    ok("tranche nodes: gpu01 idle (registered through the controller)")
                else:
                    fail(f"tranche nodes did not list gpu01 idle within 30 s: {out.strip()}")
    finally:
        for name in ("tranche-agent", "tranched"):
            p = procs.get(name)
            if p is None:
                continue
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
                fail(f"{name} did not stop within 30 s of SIGTERM")
                continue
            if rc == 0:
                ok(f"{name} stopped on SIGTERM with status 0")
            else:
                fail(f"{name} stopped with status {rc}")
        try:
            os.unlink(os.path.join(WORK, "pids"))
        except FileNotFoundError:
            pass
    return 1 if failed else 0


if __name__ == "__main__":
    # A SIGTERM from the caller's trap stops the daemons through `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())

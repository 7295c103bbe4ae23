"""Starts `tranche dev` (3 controllers, 4 agents with fake GPUs) for the tests, and
stops it at the end. `TRANCHE_BIN` names the `tranche` binary; by default the one in
`$CARGO_TARGET_DIR` or the repository's `target/`, debug build."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def tranche_bin() -> str:
    if os.environ.get("TRANCHE_BIN"):
        return os.environ["TRANCHE_BIN"]
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    for profile in ("debug", "release"):
        p = target / profile / "tranche"
        if p.exists():
            return str(p)
    raise RuntimeError(
        "no tranche binary: build it (cargo build -p tranche-cli -p tranched -p tranche-agent) or set TRANCHE_BIN"
    )


@dataclass
class Dev:
    """A running `tranche dev` cluster."""

    dir: Path
    proc: subprocess.Popen
    config: str  # the dev user's client config (TRANCHE_CONFIG)
    user: str
    urls: list[str]
    ca: str
    token: str
    # What `tranche dev` prints for boto3: AWS_ENDPOINT_URL_BATCH,
    # AWS_ENDPOINT_URL_SAGEMAKER, AWS_ENDPOINT_URL_CLOUDWATCH_LOGS, AWS_ENDPOINT_URL_S3,
    # AWS_ENDPOINT_URL_IAM, AWS_CA_BUNDLE,
    # AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (the dev user's key).
    aws_env: dict[str, str]
    # The admin's key, as `tranche dev` prints it on the next line.
    aws_admin_env: dict[str, str]

    def config_of(self, role: str, name: str) -> str:
        return str(self.dir / f"{role}-{name}.toml")

    def controller_pids(self) -> dict[int, int]:
        """Controller number (1..3) to the pid of its process, found by its config
        file (these processes are children of this session's `tranche dev`)."""
        out: dict[int, int] = {}
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                cmd = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            for i in (1, 2, 3):
                if str(self.dir / f"c{i}.toml").encode() in cmd:
                    out[i] = int(p.name)
        return out

    def http_addr_of(self, i: int) -> str:
        text = (self.dir / f"c{i}.toml").read_text()
        m = re.search(r'^http_addr = "([^"]+)"', text, re.M)
        assert m, text
        return "https://" + m.group(1)


def start_dev(tmp: Path, *args: str) -> Dev:
    """Starts `tranche dev` in `tmp`, with `args` as more of its options."""
    env = dict(os.environ, TRANCHE_LOG="warn")
    err = open(tmp / "dev.err", "w+")
    proc = subprocess.Popen(
        [tranche_bin(), "dev", "--dir", str(tmp / "cluster"), *args],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=env,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    deadline = time.monotonic() + 60
    text = ""
    while time.monotonic() < deadline:
        text = (tmp / "dev.err").read_text()
        if "Ctrl-C stops everything" in text:
            break
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    m = re.match(r"export TRANCHE_CONFIG=(\S+)", line)
    t = re.search(r"TRANCHE_URL=(\S+) TRANCHE_CA=(\S+) TRANCHE_TOKEN=\$\(cat (\S+)\)", text)
    if not m or not t:
        proc.kill()
        raise RuntimeError(f"tranche dev did not start:\n{line}\n{text}")
    user = re.search(r"as the user (\S+);", text).group(1)
    cfg = m.group(1)
    urls = re.findall(r'"(https://[^"]+)"', Path(cfg).read_text())
    aws = re.search(r"export (AWS_ENDPOINT_URL_BATCH=.*)", text)
    if not aws:
        proc.kill()
        raise RuntimeError(f"tranche dev printed no AWS exports:\n{text}")
    aws_env = dict(kv.split("=", 1) for kv in aws.group(1).split())
    adm = re.search(r"^\s*export (AWS_ACCESS_KEY_ID=\S+ AWS_SECRET_ACCESS_KEY=\S+)\s*$", text, re.M)
    if not adm:
        proc.kill()
        raise RuntimeError(f"tranche dev printed no admin access key:\n{text}")
    aws_admin_env = dict(kv.split("=", 1) for kv in adm.group(1).split())
    token = Path(t.group(3)).read_text().strip()
    return Dev(tmp / "cluster", proc, cfg, user, urls, t.group(2), token, aws_env, aws_admin_env)


def stop_dev(d: Dev) -> None:
    d.proc.send_signal(signal.SIGINT)
    try:
        d.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        d.proc.kill()


@pytest.fixture(scope="session")
def dev():
    with tempfile.TemporaryDirectory(prefix="tranche-py-") as tmp:
        d = start_dev(Path(tmp))
        try:
            yield d
        finally:
            stop_dev(d)

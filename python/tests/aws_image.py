"""Builds a small OCI image layout for the training-job tests: the host's static
busybox, and an entrypoint script that prints the SageMaker contract it finds."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

ENTRYPOINT = """#!/bin/sh
echo "args: $*"
echo "hyperparameters: $(cat /opt/ml/input/config/hyperparameters.json)"
echo "resourceconfig: $(cat /opt/ml/input/config/resourceconfig.json)"
echo "hosts: $SM_HOSTS current: $SM_CURRENT_HOST gpus: $SM_NUM_GPUS lr: $SM_HP_LR"
echo "model: $SM_MODEL_DIR"
echo trained > /opt/ml/model/model.txt
if [ -n "$SLEEP_S" ]; then
  trap 'echo checkpoint; exit 0' TERM
  sleep "$SLEEP_S" &
  wait
fi
"""


def busybox() -> str:
    for p in ("/bin/busybox", "/usr/bin/busybox"):
        if Path(p).exists():
            return p
    raise RuntimeError("no busybox: install busybox-static")


def _blob(layout: Path, media_type: str, data: bytes) -> dict:
    h = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / h).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{h}", "size": len(data)}


def _add(t: tarfile.TarFile, name: str, data: bytes | None = None, *, mode: int = 0o755,
         kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.mtime = 1_700_000_000
    info.type = kind
    info.linkname = link
    if data is not None:
        info.size = len(data)
    t.addfile(info, io.BytesIO(data) if data is not None else None)


def build(layout: Path) -> Path:
    """Writes the layout at `layout` (replacing what is there)."""
    bb = busybox()
    applets = subprocess.run([bb, "--list"], capture_output=True, text=True).stdout.split()
    for must in ("sh", "sleep", "echo", "cat", "env", "ls", "test"):
        if must not in applets:
            applets.append(must)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "root", "opt"):
            _add(t, d, kind=tarfile.DIRTYPE)
        _add(t, "bin/busybox", Path(bb).read_bytes())
        for a in applets:
            if a != "busybox" and "/" not in a:
                _add(t, f"bin/{a}", kind=tarfile.SYMTYPE, link="busybox", mode=0o777)
        _add(t, "entry.sh", ENTRYPOINT.encode())
    layer = buf.getvalue()
    if layout.exists():
        shutil.rmtree(layout)
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    l1 = _blob(layout, "application/vnd.oci.image.layer.v1.tar", layer)
    config = {
        "os": "linux",
        "architecture": "amd64",
        "config": {"Env": ["PATH=/bin"], "Entrypoint": ["/entry.sh"]},
        "rootfs": {"type": "layers", "diff_ids": [l1["digest"]]},
    }
    cfg = _blob(layout, "application/vnd.oci.image.config.v1+json", json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": cfg,
        "layers": [l1],
    }
    m = _blob(layout, "application/vnd.oci.image.manifest.v1+json", json.dumps(manifest).encode())
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [m]}))
    return layout

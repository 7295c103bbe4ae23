"""The training image of the AWS tests: the demo image `tranche dev` makes at start
(an OCI image layout of the host's static busybox, whose entrypoint follows SageMaker's
`train` convention and prints the contract it finds: `tranche_local::demo_image`)."""

from __future__ import annotations

from pathlib import Path


def demo_image(layout: Path) -> Path:
    """The demo image at `layout`, as `tranche dev` made it."""
    if not (layout / "index.json").exists():
        raise RuntimeError(
            f"tranche dev made no demo image at {layout}: it needs a static busybox "
            "(apt-get install busybox-static), and says so at start")
    return layout


def python_image(layout: Path) -> Path:
    """An OCI image layout with this host's bash, coreutils, python3 and pip (what the
    SageMaker SDK's `sm_train.sh` needs: `SourceCode` jobs run it with `/bin/bash`), made
    of the host's own files and the libraries they load; no entrypoint."""
    import gzip
    import hashlib
    import io
    import json
    import os
    import re
    import subprocess
    import tarfile

    if (layout / "index.json").exists():
        return layout
    py = Path(os.path.realpath("/usr/bin/python3"))
    stdlib = Path(f"/usr/lib/python3.{py.name.rsplit('.', 1)[-1]}")
    if not py.exists() or not stdlib.is_dir() or not Path("/usr/bin/pip3").exists():
        raise RuntimeError("the python image needs Debian's python3 and python3-pip")
    tools = [Path("/usr/bin", t) for t in ("bash", "cat", "chmod", "ls", "mkdir", "env", "rm")]
    programs = [py, *tools]
    dynload = list((stdlib / "lib-dynload").glob("*.so"))
    libs: set[str] = set()
    for f in programs + dynload:
        out = subprocess.run(["ldd", str(f)], capture_output=True, text=True).stdout
        libs.update(m for m in re.findall(r"(/\S+\.so[.\d]*)", out))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        def add_dir(name: str) -> None:
            d = tarfile.TarInfo(name)
            d.type, d.mode = tarfile.DIRTYPE, 0o755
            t.addfile(d)

        def add_link(name: str, target: str) -> None:
            li = tarfile.TarInfo(name)
            li.type, li.linkname = tarfile.SYMTYPE, target
            t.addfile(li)

        for d in ("usr", "usr/bin", "usr/lib", "usr/lib64", "usr/lib/python3",
                  "usr/lib/python3/dist-packages", "usr/lib/x86_64-linux-gnu",
                  "etc", "tmp", "proc", "sys", "dev", "opt", "root"):
            add_dir(d)
        for name, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"),
                             ("usr/bin/python3", py.name), ("usr/bin/python", py.name)):
            add_link(name, target)
        skip = re.compile(r"/(test|tests|idlelib|tkinter|turtledemo|ensurepip|__pycache__)(/|$)")
        seen: set[str] = set()

        def add_file(p: Path) -> None:
            real = os.path.realpath(p)
            name = str(p).lstrip("/")
            if name.startswith(("lib64/", "lib/")):
                name = "usr/" + name
            if name in seen:
                return
            seen.add(name)
            # A link's target, under the name the loader and the shell look for.
            t.add(real, arcname=name, recursive=False)

        for f in programs + [Path("/usr/bin/pip3")] + [Path(x) for x in sorted(libs)]:
            add_file(f)
        for root in (stdlib, Path("/usr/lib/python3/dist-packages/pip")):
            for dirpath, dirnames, filenames in os.walk(root):
                if skip.search(dirpath):
                    dirnames[:] = []
                    continue
                t.add(dirpath, arcname=dirpath.lstrip("/"), recursive=False)
                for fn in filenames:
                    t.add(os.path.join(dirpath, fn), arcname=os.path.join(dirpath, fn).lstrip("/"),
                          recursive=False)
        passwd = b"root:x:0:0:root:/root:/bin/bash\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        t.addfile(info, io.BytesIO(passwd))
    layer = buf.getvalue()

    def blob(media: str, data: bytes) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (layout / "blobs" / "sha256" / digest).write_bytes(data)
        return {"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)}

    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    gz = gzip.compress(layer, compresslevel=1)
    l1 = blob("application/vnd.oci.image.layer.v1.tar+gzip", gz)
    config = {"os": "linux", "architecture": "amd64",
              "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]},
              "rootfs": {"type": "layers",
                         "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]}}
    cfg = blob("application/vnd.oci.image.config.v1+json", json.dumps(config).encode())
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": cfg, "layers": [l1]}
    m = blob("application/vnd.oci.image.manifest.v1+json", json.dumps(manifest).encode())
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [m]}))
    return layout

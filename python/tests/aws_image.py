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

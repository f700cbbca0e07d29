"""The repository's Dockerfile built as CI builds it, with no registry: FROM the lab's
debootstrapped Debian 12 (its python3 is 3.11, as in python:3.11-slim-bookworm) and with the
locked wheels from a wheelhouse in the build context. Everything else is the user's
`docker build -t spark-bot .`: the same file, the same context (the checkout)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from lab import dockerd, image
from lab import topology as T

REPO = Path(__file__).resolve().parents[2]
TAG = "spark-bot"  # compose.yaml's image
BUILD_STAGE_TAG = "spark-bot:build-stage"  # kept so `image prune` leaves the layer cache
WHEELHOUSE = ".wheelhouse"  # in the context, ignored by git


def build_args() -> list[str]:
    """What the offline build adds to `docker build -t spark-bot .`: these two arguments."""
    return ["--build-arg", f"BASE={T.BASE_IMAGE}", "--build-arg", f"WHEELS={WHEELHOUSE}"]


def cached_wheelhouse() -> Path:
    """The lock's wheels, downloaded once per lock into the lab's cache."""
    lock = (REPO / "requirements.lock").read_bytes()
    cache = T.CACHE_ROOT / f"wheelhouse-{hashlib.sha256(lock).hexdigest()[:12]}"
    if not cache.is_dir():
        partial = cache.with_name(cache.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(
            ["sh", str(REPO / "scripts" / "wheelhouse.sh"), str(partial)],
            check=True,
            capture_output=True,
            timeout=600,
        )
        partial.rename(cache)
        for old in T.CACHE_ROOT.glob("wheelhouse-*"):
            if old != cache:
                shutil.rmtree(old, ignore_errors=True)
    return cache


def _place_wheelhouse() -> None:
    target = REPO / WHEELHOUSE
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    for wheel in cached_wheelhouse().iterdir():
        try:
            os.link(wheel, target / wheel.name)
        except OSError:
            shutil.copy2(wheel, target / wheel.name)


def build(node: T.Node) -> str:
    """Build the image on the node's engine (layer cache kept between runs); its ID."""
    image.ensure_base(node)
    _place_wheelhouse()
    for target in (["--target", "build", "-t", BUILD_STAGE_TAG], ["-t", TAG]):
        dockerd.cli(node, "build", "-q", *build_args(), *target, str(REPO), timeout=600)
    built = image.image_id(node, TAG)
    assert built, f"the build produced no {TAG} on {node.name}"
    return built

"""Images: the debootstrapped base (cached as a tarball), the emulator image built on
node 0 and copied to the other engines with save|load, and the image-mismatch variant."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from . import dockerd, real_engine
from . import topology as T
from .errors import LabError
from .preflight import tool
from .proc import run

LAB_DIR = Path(__file__).resolve().parent
EMULATOR_DIR = LAB_DIR / "emulator"
IMAGE_DIR = LAB_DIR / "image"


def _source_files() -> list[Path]:
    files = []
    for root in (EMULATOR_DIR, IMAGE_DIR):
        if root.is_dir():
            files += [
                p
                for p in root.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
            ]
    return sorted(files)


def source_hash() -> str:
    h = hashlib.sha256(base_packages_digest().encode())
    for p in _source_files():
        h.update(str(p.relative_to(LAB_DIR)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def inspect(node: T.Node, ref: str) -> dict | None:
    try:
        status, body = dockerd.api(node, "GET", f"/images/{ref}/json", timeout=10)
    except OSError:
        return None
    return json.loads(body) if status == 200 else None


def image_id(node: T.Node, ref: str = T.IMAGE_TAG) -> str | None:
    info = inspect(node, ref)
    return info["Id"] if info else None


def _labels(info: dict | None) -> dict:
    return ((info or {}).get("Config") or {}).get("Labels") or {}


# --- base -------------------------------------------------------------------
def base_packages_digest() -> str:
    return hashlib.sha256(",".join(T.BASE_PACKAGES).encode()).hexdigest()[:12]


def base_tarball() -> Path:
    """The debootstrapped rootfs, named by its package list (a new list makes a new one)."""
    return T.BASE_TARBALL.with_name(f"{T.BASE_TARBALL.stem}-{base_packages_digest()}.tar")


def ensure_base_tarball() -> Path:
    tarball = base_tarball()
    if tarball.exists() and tarball.stat().st_size > 0:
        return tarball
    T.CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=T.CACHE_ROOT))
    try:
        p = subprocess.run(
            [
                tool("debootstrap"),
                "--variant=minbase",
                "--include=" + ",".join(T.BASE_PACKAGES),
                T.DEBIAN_SUITE,
                str(work),
                T.DEBIAN_MIRROR,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=900,
        )
        if p.returncode != 0:
            raise LabError(
                f"debootstrap failed (is {T.DEBIAN_MIRROR} reachable?):\n"
                + p.stdout.decode(errors="replace")[-3000:]
            )
        # trim what a container never needs
        for sub in (
            "var/cache/apt/archives",
            "var/lib/apt/lists",
            "usr/share/doc",
            "usr/share/man",
        ):
            d = work / sub
            if d.is_dir():
                for child in d.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    elif child.name != "lock":
                        child.unlink(missing_ok=True)
        tmp = tarball.with_suffix(".tar.partial")
        run(["tar", "-C", str(work), "--numeric-owner", "-cf", str(tmp), "."], timeout=600)
        tmp.replace(tarball)
        for old in T.CACHE_ROOT.glob(f"{T.BASE_TARBALL.stem}*.tar"):
            if old != tarball:
                old.unlink(missing_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tarball


def ensure_base(node: T.Node) -> None:
    digest = base_packages_digest()
    if _labels(inspect(node, T.BASE_IMAGE)).get(T.BASE_PACKAGES_LABEL) == digest:
        return
    tar = ensure_base_tarball()
    with open(tar, "rb") as f:
        env_docker = [
            tool("docker"),
            "import",
            "--change",
            f"LABEL {T.BASE_PACKAGES_LABEL}={digest}",
            "-",
            T.BASE_IMAGE,
        ]
        p = subprocess.run(
            env_docker,
            stdin=f,
            capture_output=True,
            env=dict(os.environ, DOCKER_HOST=node.docker_host),
            timeout=600,
        )
    if p.returncode != 0:
        raise LabError(f"docker import of {tar} into {node.name} failed:\n{p.stderr.decode()}")


# --- emulator image ---------------------------------------------------------
def build(node: T.Node, digest: str) -> str:
    ensure_base(node)
    with tempfile.TemporaryDirectory(prefix="spark-lab-ctx-") as ctx:
        ctxp = Path(ctx)
        ign = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")
        if EMULATOR_DIR.is_dir():
            shutil.copytree(EMULATOR_DIR, ctxp / "emulator", ignore=ign)
        else:
            (ctxp / "emulator").mkdir()
        shutil.copytree(IMAGE_DIR, ctxp / "image", ignore=ign)
        dockerd.cli(
            node,
            "build",
            "-q",
            "--build-arg",
            f"BASE={T.BASE_IMAGE}",
            "--label",
            f"{T.IMAGE_HASH_LABEL}={digest}",
            "-t",
            T.IMAGE_TAG,
            "-f",
            str(ctxp / "image" / "Dockerfile"),
            str(ctxp),
        )
    iid = image_id(node)
    if not iid:
        raise LabError(f"image build on {node.name} produced no {T.IMAGE_TAG}")
    return iid


def copy_image(src: T.Node, dst: T.Node, tag: str = T.IMAGE_TAG) -> None:
    """docker save | docker load between two engines."""
    docker = tool("docker")
    with subprocess.Popen(  # its pipes closed on the way out, whichever way
        [docker, "save", tag],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, DOCKER_HOST=src.docker_host),
    ) as save:
        assert save.stdout is not None and save.stderr is not None  # the pipes asked for above
        load = subprocess.run(
            [docker, "load", "-q"],
            stdin=save.stdout,
            capture_output=True,
            env=dict(os.environ, DOCKER_HOST=dst.docker_host),
            timeout=600,
        )
        save.stdout.close()
        save.wait(timeout=60)
        if save.returncode != 0 or load.returncode != 0:
            raise LabError(
                f"copying {tag} {src.name} -> {dst.name} failed: "
                f"{save.stderr.read().decode()} {load.stderr.decode()}"
            )


def _drop_dangling(node: T.Node) -> None:
    dockerd.cli(node, "image", "prune", "-f", check=False, timeout=60)


def ensure(nodes: list[T.Node], variant_node: int | None = None) -> str:
    """Make every node hold the same current emulator image (node `variant_node`, if
    given, a variant of it). Returns the canonical image ID."""
    head = nodes[0]
    digest = source_hash()
    info = inspect(head, T.IMAGE_TAG)
    if _labels(info).get(T.IMAGE_HASH_LABEL) != digest or T.IMAGE_VARIANT_LABEL in _labels(info):
        build(head, digest)
        _drop_dangling(head)
    canonical = image_id(head)
    if canonical is None:
        raise LabError(f"{head.name} holds no {T.IMAGE_TAG} after the build")
    for n in nodes[1:]:
        if variant_node == n.index and inspect(n, canonical):
            continue  # the variant is made from the canonical image it holds (below)
        iid = image_id(n)
        if iid == canonical:
            continue
        if (
            iid
            and _labels(inspect(n, T.IMAGE_TAG)).get(T.IMAGE_VARIANT_LABEL)
            and inspect(n, canonical)
        ):
            dockerd.cli(n, "tag", canonical, T.IMAGE_TAG)  # a variant: put the original back
        else:
            copy_image(head, n)
        _drop_dangling(n)
    if variant_node is not None:
        make_variant(nodes[variant_node], canonical)
    return canonical


def make_variant(node: T.Node, canonical: str) -> str:
    """Same tag, different image ID (an extra label on top of the canonical image)."""
    info = inspect(node, T.IMAGE_TAG)
    if info and info["Id"] != canonical and _labels(info).get(T.IMAGE_VARIANT_LABEL):
        return info["Id"]
    if not inspect(node, canonical):
        raise LabError(f"{node.name} does not hold the canonical image {canonical}")
    dockerfile = f"FROM {canonical}\nLABEL {T.IMAGE_VARIANT_LABEL}={int(time.time())}\n".encode()
    dockerd.cli(node, "build", "-q", "-t", T.IMAGE_TAG, "-", input=dockerfile)
    iid = image_id(node)
    if iid is None or iid == canonical:
        raise LabError(f"variant build on {node.name} did not give a new image ID")
    return iid


def restore(nodes: list[T.Node], canonical: str) -> None:
    for n in nodes:
        if image_id(n) != canonical:
            if inspect(n, canonical):
                dockerd.cli(n, "tag", canonical, T.IMAGE_TAG)
            else:
                copy_image(nodes[0], n)
        # also where the tag is right already (a sync-image put it back): the variant left
        # untagged would keep the canonical image as its parent past an `rmi` of the tag
        _drop_dangling(n)


# --- real-engine image --------------------------------------------------------
def ensure_real(nodes: list[T.Node], venv: Path) -> str:
    """Every node holds the same spark-lab/vllm-real image (the real engine's node image)."""
    head = nodes[0]
    files = sorted(p for p in real_engine.IMAGE_DIR.iterdir() if p.is_file())
    h = hashlib.sha256(f"{venv}\0{base_packages_digest()}".encode())
    for p in files:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    digest = h.hexdigest()[:16]
    if _labels(inspect(head, real_engine.IMAGE_TAG)).get(T.IMAGE_HASH_LABEL) != digest:
        ensure_base(head)
        dockerd.cli(
            head,
            "build",
            "-q",
            "--build-arg",
            f"BASE={T.BASE_IMAGE}",
            "--build-arg",
            f"VENV={venv}",
            "--label",
            f"{T.IMAGE_HASH_LABEL}={digest}",
            "-t",
            real_engine.IMAGE_TAG,
            str(real_engine.IMAGE_DIR),
        )
        _drop_dangling(head)
    canonical = image_id(head, real_engine.IMAGE_TAG)
    if not canonical:
        raise LabError(f"image build on {head.name} produced no {real_engine.IMAGE_TAG}")
    for n in nodes[1:]:
        if image_id(n, real_engine.IMAGE_TAG) != canonical:
            copy_image(head, n, real_engine.IMAGE_TAG)
            _drop_dangling(n)
    return canonical

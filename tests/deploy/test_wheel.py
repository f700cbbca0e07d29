"""The wheel `python -m build` makes is the whole program: installed into a fresh venv, run from
another directory, `spark-bot demo` launches the embedded cluster with the emulator it ships.

The fresh venv sees the locked dependencies through a .pth line to the checkout's venv (installing
them anew would take minutes); spark-bot itself comes only from the wheel: the checkout's venv
holds it as an editable install, whose path hook a .pth-added directory never runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PIP = [sys.executable, "-m", "pip"]
WHERE = "import bot, demo, lab.emulator; print(bot.__file__, demo.__file__, lab.emulator.__file__)"
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    # built from the checkout's files alone: a build/ folder left by an earlier build would add
    # its stale files to the wheel
    source = root / "source"
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    for name in filter(None, tracked):
        if (REPO / name).is_file() and not name.startswith("tests/"):
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(root / "dist"), str(source)],
        check=True,
        capture_output=True,
        timeout=180,
    )
    (wheel,) = (root / "dist").glob("spark_bot-*.whl")
    (root / "files.txt").write_text("\n".join(zipfile.ZipFile(wheel).namelist()))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "locked-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [*PIP, "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return venv


def _run(venv: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(venv / "bin" / "spark-bot"), *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_installed_code_is_the_wheels_not_the_checkouts(installed, tmp_path):
    where = subprocess.run(
        [str(installed / "bin" / "python"), "-c", WHERE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(where) == 3 and all(path.startswith(str(installed)) for path in where), where
    version = _run(installed, tmp_path, "--version")
    assert version.returncode == 0 and version.stdout.startswith("spark-bot 0."), version


def test_the_wheel_holds_of_the_lab_only_the_emulator_the_demo_runs(installed):
    files = (installed.parent / "files.txt").read_text().split()
    lab = sorted({f.rsplit("/", 1)[0] for f in files if f.startswith("lab/")})
    assert lab == ["lab/emulator"], lab
    assert "lab/emulator/profiles.py" in files
    assert not [f for f in files if f.startswith(("tests/", "testkit/", "benchmarks/"))]


def test_the_demo_runs_outside_the_checkout(installed, tmp_path):
    run = _run(installed, tmp_path, "demo", "--run", "/spark up")
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    assert "every figure is emulated" in out
    assert "✔ Weights loaded on every rank" in out and "✅ Ready" in out
    assert "Sample completion: 32 tokens, 2" in out, "the seed's pace: about 27 tok/s"

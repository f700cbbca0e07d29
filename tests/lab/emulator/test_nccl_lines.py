"""The emulator's NCCL lines held against NCCL's and vLLM's sources (tests/data/nccl_sources.json,
derived from the commits it names): every rank prints its version at INFO from NCCL 2.22.3, rank
0 alone and bare before; the git line from 2.29.2; the version is the one of the library the
rank loads (VLLM_NCCL_SO_PATH, else torch's); vLLM 0.32 names it once, from the first rank."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lab.emulator import dialects, nccl_lib
from lab.emulator.serve import Serve, build_parser

SOURCES = json.loads((Path(__file__).parents[2] / "data" / "nccl_sources.json").read_text())
NCCL = SOURCES["nccl"]
PREFIX = re.compile(NCCL["info_prefix"]["regex"])


def serve(world: int = 2) -> Serve:
    args = build_parser().parse_args(["Qwen/Qwen3-0.6B", "--tensor-parallel-size", str(world)])
    emulated = Serve(args)
    emulated.ranks = [emulated.mk_rank(r, "198.18.1.10", local=True) for r in range(world)]
    return emulated


def own_lines(lines: list[str]) -> list[str]:
    """NCCL's own messages: its INFO prefix taken off (bare lines stay as they are)."""
    return [PREFIX.sub("", line) for line in lines]


@pytest.fixture
def library(tmp_path, monkeypatch):
    def loaded(version: str, build: str = "a") -> None:
        path = tmp_path / f"{version}-{build}" / "libnccl.so.2"
        nccl_lib.make(str(path), version, build)
        monkeypatch.setenv("VLLM_NCCL_SO_PATH", str(path))

    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    return loaded


@pytest.mark.parametrize("version", ["2.21.5", "2.22.3", "2.27.7", "2.28.9", "2.29.2"])
def test_each_rank_prints_its_version_as_that_nccl_release_does(library, version):
    library(version)
    emulated = serve()
    since = tuple(int(n) for n in NCCL["version_every_rank_since"].split("."))
    every_rank = tuple(int(n) for n in version.split(".")) >= since
    for rk in emulated.ranks:
        lines = emulated.nccl_lines(rk)
        said = [line for line in lines if "NCCL version" in line]
        if every_rank:
            assert len(said) == 1 and PREFIX.match(said[0]), said
        elif rk["rank"] == 0:
            assert len(said) == 1 and not PREFIX.match(said[0]), "printf'd bare to stdout"
        else:
            assert said == [], "only rank 0 printed it before 2.22.3"
        for message in own_lines(lines):
            if message.startswith("NCCL version"):
                assert re.match(NCCL["version"]["regex"], message), message
                assert message == f"NCCL version {version}+cuda13.0"
            if message.startswith("cudaDriverVersion"):
                assert re.match(NCCL["cuda_driver"]["regex"], message), message
        assert all(PREFIX.match(line) for line in lines if "NCCL version" not in line)


def test_no_git_line_before_2_29_2(library):
    library("2.28.9")
    emulated = serve()
    assert not [x for x in emulated.nccl_lines(emulated.ranks[0]) if "git version" in x]
    assert NCCL["git_version"]["since"] == "2.29.2"


def test_two_builds_of_one_version_say_the_same_version_from_different_files(tmp_path):
    first, second = tmp_path / "a.so", tmp_path / "b.so"
    nccl_lib.make(str(first), "2.28.9", "a")
    nccl_lib.make(str(second), "2.28.9", "b")
    assert first.read_bytes() != second.read_bytes()
    assert nccl_lib.identity(str(first)) == nccl_lib.identity(str(second))
    assert nccl_lib.identity(str(first))[:2] == ((2, 28, 9), "13.0")


def test_vllm_0_32_names_its_nccl_once_as_its_source_does():
    source = SOURCES["vllm"]["0.32.0"]["pynccl"]
    where, message = dialects.DIALECTS["0.32"]["pynccl"]
    assert (where, message) == (source["where"], source["message"])
    assert dialects.DIALECTS["0.32"]["pynccl_every_rank"] is source["every_rank"]


def test_the_library_vllm_loads_is_the_one_its_find_nccl_library_names(monkeypatch):
    monkeypatch.delenv("VLLM_NCCL_SO_PATH", raising=False)
    assert nccl_lib.loaded_path() == nccl_lib.BUNDLED, "libnccl.so.2: torch's, already loaded"
    monkeypatch.setenv("VLLM_NCCL_SO_PATH", "/opt/system-nccl/libnccl.so.2")
    assert nccl_lib.loaded_path() == "/opt/system-nccl/libnccl.so.2"
    assert "VLLM_NCCL_SO_PATH" in SOURCES["vllm"]["0.32.0"]["find_nccl_library"]

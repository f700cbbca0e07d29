"""The user's build and CI's offline build are one Dockerfile: they differ only in the build
arguments it declares, whose defaults are the user's (a registry's base image, PyPI)."""

from __future__ import annotations

import re

from tests.deploy import offline_image

DOCKERFILE = (offline_image.REPO / "Dockerfile").read_text()


def test_the_offline_build_sets_only_the_dockerfiles_arguments_and_their_defaults_are_online():
    declared = dict(re.findall(r"^ARG (\w+)=(.*)$", DOCKERFILE, re.M))
    assert declared == {"BASE": "python:3.11-slim-bookworm", "WHEELS": ""}
    given = offline_image.build_args()
    assert given[::2] == ["--build-arg"] * len(declared)
    assert {arg.split("=")[0] for arg in given[1::2]} == set(declared)


def test_the_runtime_is_non_root_with_a_health_check_and_a_volume():
    runtime = DOCKERFILE.split("\nFROM ${BASE}\n")[1]
    assert "USER spark" in runtime and "VOLUME /var/lib/spark-bot" in runtime
    assert 'CMD ["python", "-m", "bot.healthcheck"]' in runtime
    assert "--require-hashes --requirement /deps/runtime.txt" in DOCKERFILE

"""An API key: vLLM asks for it on /v1/*, the bot's own client sends it, and it shows nowhere
(no lab: the demo's embedded cluster, whose emulated vLLM guards /v1 as vLLM does)."""

from __future__ import annotations

import httpx
import pytest

from bot.config import load_config
from cluster.config import APIConfig, ClusterConfig, resolve_secrets
from cluster.controller import Controller
from cluster.errors import ConfigError
from cluster.events import Ready
from demo.cluster import embedded_cluster
from testkit.lab_cluster import LAB_CONFIG, collect

pytestmark = pytest.mark.timeout(120)
KEY = "spark-test-key-Zq81hVx0pL3c"


async def test_the_api_key_guards_v1_and_the_bot_sends_it():
    async with embedded_cluster(nodes=2) as embedded:
        config = embedded.config.model_copy(update={"api": APIConfig(key_env="SPARK_API_KEY")})
        with pytest.raises(ConfigError, match=r"api\.key_env"):
            resolve_secrets(config, {})
        secrets = resolve_secrets(config, {"SPARK_API_KEY": KEY})
        assert secrets.api_key == KEY
        controller = Controller(config, secrets)
        try:
            events = await collect(controller.up(sample_max_tokens=8))
            assert isinstance(events[-1], Ready), events[-1]
            verified = await collect(controller.verify())
            assert [e.checkpoint for e in verified if e.kind == "failed"] == []
            base = f"http://127.0.0.1:{config.serve.port}"
            async with httpx.AsyncClient(base_url=base, timeout=10) as client:
                assert (await client.get("/v1/models")).status_code == 401
                assert (await client.get("/health")).status_code == 200, (
                    "as vLLM: only /v1 is guarded"
                )
                authorised = await client.get(
                    "/v1/models", headers={"Authorization": f"Bearer {KEY}"}
                )
                assert authorised.status_code == 200
            shown = "".join(e.model_dump_json() for e in events + verified)
            assert KEY not in shown
        finally:
            await collect(controller.down())


def test_a_direct_api_on_loopback_is_refused():
    cluster = load_config(LAB_CONFIG).cluster.model_dump()
    with pytest.raises(ValueError, match=r"cannot reach an API bound to 127\.0\.0\.1"):
        ClusterConfig.model_validate(
            {**cluster, "api": {"access": "direct", "host": "10.0.0.1", "bind": "127.0.0.1"}}
        )

"""The demo's own resources: a RabbitMQ vhost, a Redis key prefix and a SQLite database,
made for one run and removed after it, so ``make demo`` never touches a deployment's
queues, keys or store (nor leaves a ``recur.sqlite3`` in the checkout)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from config.errors import BrokerUnavailable
from config.settings import Settings, load_settings


@dataclass(frozen=True)
class DemoEnv:
    """Names of one demo run's resources and the settings that select them."""

    run: str
    workdir: Path
    base: Settings

    @property
    def vhost(self) -> str:
        return f"recur-demo-{self.run}"

    @property
    def broker_url(self) -> str:
        url = urlsplit(self.base.broker_url)
        return urlunsplit((url.scheme, url.netloc, "/" + quote(self.vhost, safe=""), "", ""))

    @property
    def environment(self) -> dict[str, str]:
        """RECUR_* variables of the demo's processes."""
        return {"RECUR_BROKER_URL": self.broker_url,
                "RECUR_KEY_PREFIX": f"recur-demo-{self.run}",
                "RECUR_DATABASE_URL": f"sqlite:///{self.workdir / 'demo.sqlite3'}"}

    def settings(self, environ: dict[str, str]) -> Settings:
        return load_settings({**environ, **self.environment})

    def _api(self) -> tuple[str, tuple[str, str]]:
        from tasks.cli.flower_main import broker_api

        api = urlsplit(broker_api(self.base.broker_url, self.base.flower_broker_api))
        auth = (api.username or "guest", api.password or "guest")
        return f"{api.scheme}://{api.hostname}:{api.port or 15672}{api.path}", auth

    def create_vhost(self) -> None:
        """Through the management API (scripts/ensure-services.sh enables it)."""
        api, auth = self._api()
        vhost = quote(self.vhost, safe="")
        try:
            httpx.put(f"{api}vhosts/{vhost}", auth=auth, timeout=30).raise_for_status()
            httpx.put(f"{api}permissions/{vhost}/{quote(auth[0], safe='')}", auth=auth,
                      json={"configure": ".*", "write": ".*", "read": ".*"},
                      timeout=30).raise_for_status()
        except httpx.HTTPError as exc:
            raise BrokerUnavailable(f"cannot create the demo's vhost {self.vhost} through the "
                                    f"RabbitMQ management API {api}: {exc} (is the management "
                                    f"plugin on? scripts/ensure-services.sh enables it)") from exc

    def remove(self, keep_logs: bool) -> None:
        """Delete the vhost (its queues), the Redis keys and, unless kept, the directory."""
        import redis

        api, auth = self._api()
        httpx.delete(f"{api}vhosts/{quote(self.vhost, safe='')}", auth=auth, timeout=60)
        client = redis.Redis.from_url(self.base.redis_url)
        for key in client.scan_iter(match=f"recur-demo-{self.run}:*", count=1000):
            client.delete(key)
        client.close()
        if not keep_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)


def new_demo_env(run: str, base: Settings) -> DemoEnv:
    return DemoEnv(run, Path(tempfile.mkdtemp(prefix=f"recur-demo-{run}-")), base)

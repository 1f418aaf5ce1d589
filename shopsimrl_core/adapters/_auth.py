"""The one place that builds the authentication header of an OpenAI-compatible endpoint.

The key is never in a config file: a config names the environment variable that holds it
(``model.api_key_env``), and the variable is read when a request is built, so a key exported after
start-up is used and nothing that records a config (plans, manifests, metadata, logs) can hold it.

Every consumer — the model client, its replicas, the preflight, the health checks, the server
launcher, the analyst and the Dagster resources — takes an :class:`EndpointAuth` (from
``ModelConfig.auth()``) rather than a variable name, so a new way to authenticate is a field here and
one line in ``ModelConfig.auth``; nothing else changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from shopsimrl_core._errors import ConfigError

__all__ = ["EndpointAuth", "bearer_headers"]


@dataclass(frozen=True)
class EndpointAuth:
    """How requests to one endpoint authenticate: the variable holding the key and the header it goes in.

    ``api_key_env`` None means an endpoint without auth. The header is ``<header>: <scheme> <key>``
    (``Authorization: Bearer <key>``, OpenAI's convention); an empty ``scheme`` sends the bare key.
    Holds no key, so it may be logged, compared and pickled freely.
    """

    api_key_env: str | None
    header: str = "Authorization"
    scheme: str = "Bearer"

    def key_is_set(self) -> bool:
        """True without auth, or when the variable holds a non-empty value now."""
        return not self.api_key_env or bool(os.environ.get(self.api_key_env, ""))

    def headers(self, *, required: bool = True) -> dict[str, str]:
        """The header carrying the key, read from the environment now.

        ``{}`` without auth. An unset or empty variable gives ``{}`` when *required* is false (probes
        that let the server answer 401), else raises.

        Raises:
            ConfigError: ``api-key-missing``, when *required* and the variable is unset or empty; the
                message names the variable (never a key) and ``.variable`` holds its name.
        """
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env, "")
        if key:
            return {self.header: f"{self.scheme} {key}" if self.scheme else key}
        if required:
            raise ConfigError(
                f"environment variable {self.api_key_env} is not set; export the API key in it, "
                "or set api_key_env: null for an endpoint without auth",
                code="api-key-missing",
                variable=self.api_key_env,
            )
        return {}


def bearer_headers(api_key_env: str | None, *, required: bool = True) -> dict[str, str]:
    """``EndpointAuth(api_key_env).headers(required=...)``: the bearer header for the key in *api_key_env*.

    Raises:
        ConfigError: ``api-key-missing``, as :meth:`EndpointAuth.headers`.
    """
    return EndpointAuth(api_key_env).headers(required=required)

"""The one place that builds the ``Authorization`` header of an OpenAI-compatible endpoint.

The key is never in a config file: a config names the environment variable that holds it
(``model.api_key_env``), and the variable is read when a request is built, so a key exported after
start-up is used and nothing that records a config (plans, manifests, metadata, logs) can hold it.
"""

from __future__ import annotations

import os

from shopsimrl_core._errors import ConfigError

__all__ = ["bearer_headers"]


def bearer_headers(api_key_env: str | None, *, required: bool = True) -> dict[str, str]:
    """The ``Authorization: Bearer <key>`` header for the key held in the variable *api_key_env*.

    ``{}`` when *api_key_env* is None (an endpoint without auth). An unset or empty variable gives
    ``{}`` when *required* is false (probes that let the server answer 401), else raises.

    Raises:
        ConfigError: ``api-key-missing``, when *required* and the variable is unset or empty; the
            message names the variable (never a key) and ``.variable`` holds its name.
    """
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env, "")
    if key:
        return {"Authorization": f"Bearer {key}"}
    if required:
        raise ConfigError(
            f"environment variable {api_key_env} is not set; export the API key in it, "
            "or set api_key_env: null for an endpoint without auth",
            code="api-key-missing",
            variable=api_key_env,
        )
    return {}

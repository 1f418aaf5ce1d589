"""The verifiers plugin ``shopsimrl-verifiers``: ShopSimulator played by shopsimrl's episode runtime.

verifiers imports a taskset by the name of an installed top-level package and takes the classes it
exports in ``__all__``; this package only re-exports them from
``shopsimrl_core.training.adapters.verifiers`` (docs/training.md#verifiers).
"""

from shopsimrl_core.training.adapters.verifiers import ShopSimEnv, ShopSimHarness, ShopSimTaskset

__all__ = ["ShopSimTaskset", "ShopSimHarness", "ShopSimEnv"]

"""What each training service can honour of the `algo` options, checked while the run
config is validated, so an option a service would reject mid-run, or silently ignore,
stops the command before anything runs (exit 2, naming option and service).

Only `service=local` has known limits. It runs SkyRL 0.4.0's Tinker-compatible server
with its JAX backend (piexp/service/compat/ pins the version); each limit below was
read in that release's source:

* losses: the JAX backend implements `cross_entropy`, `importance_sampling`, `ppo` and
  `cispo` only (`skyrl/tinker/types.py` LOSS_TYPES; `backends/jax.py` fails other
  requests), and its API refuses loss_fn_config keys for `importance_sampling`
  (`tinker/api.py` ForwardBackwardInput);
* KL reference: the engine serves one base model and fails base-model sampling for any
  other (`tinker/engine.py`); a reference checkpoint makes the tinker SDK send both
  base_model and model_path, which the server refuses ("exactly one", `tinker/api.py`
  create_sampling_session);
* checkpoint retention: the save requests have no TTL (`tinker/api.py` SaveWeights*),
  so checkpoints stay in `<run>/local_service/` and a TTL other than the cookbook's
  default would be silently ignored.

Tinker and a self-hosted server are not second-guessed: they answer for themselves.
"""

from __future__ import annotations

from piexp.config.algo import AlgoSettings
from piexp.config.defaults import default_settings

__all__ = ["LOCAL_LOSS_FNS", "refuse_unsupported_algo"]

#: RL losses SkyRL 0.4.0's JAX backend computes.
LOCAL_LOSS_FNS = ("importance_sampling", "ppo", "cispo")
_LOCAL = "service=local (SkyRL 0.4.0's Tinker-compatible server, JAX backend)"


def _local_problems(algo: AlgoSettings, model_name: str) -> list[str]:
    problems = []
    if algo.loss_fn not in LOCAL_LOSS_FNS:
        problems.append(f"algo.loss_fn={algo.loss_fn} (it implements only {', '.join(LOCAL_LOSS_FNS)})")
    elif algo.loss_fn == "importance_sampling" and algo.loss_fn_config.as_dict():
        problems.append("algo.loss_fn_config with importance_sampling (its API refuses any loss_fn_config key there)")
    if algo.kl_penalty_coef > 0:
        reference = algo.kl_reference_config
        if reference.base_model not in (None, model_name):
            problems.append(
                f"algo.kl_reference_config.base_model={reference.base_model} (the server serves "
                f"only the trained base model, {model_name})"
            )
        if reference.load_checkpoint_path is not None:
            problems.append(
                "algo.kl_reference_config.load_checkpoint_path (the SDK then sends base_model and "
                "model_path together, and the server accepts exactly one)"
            )
    # The default recipe's expiry is the cookbook's, which the server ignores harmlessly.
    default_algo = default_settings("algo", AlgoSettings)
    if algo.ttl_seconds != default_algo.ttl_seconds:
        problems.append(
            f"algo.ttl_seconds={algo.ttl_seconds} (the server has no checkpoint expiry; "
            f"checkpoints stay in the run's local_service/ folder)"
        )
    if algo.rolling_ttl_seconds != default_algo.rolling_ttl_seconds:
        problems.append(f"algo.rolling_ttl_seconds={algo.rolling_ttl_seconds} (the server has no checkpoint expiry)")
    return problems


def refuse_unsupported_algo(service_name: str, algo: AlgoSettings, model_name: str) -> None:
    """Raise ValueError (one sentence per option) if the service cannot honour the run's
    `algo` options (training `model_name`); called from `RunConfig` validation for
    mode=train."""
    if service_name != "local":
        return
    problems = _local_problems(algo, model_name)
    if problems:
        raise ValueError(
            f"{_LOCAL} cannot honour {'; '.join(problems)}. Remove {'this option' if len(problems) == 1 else 'these options'} "
            f"or train with service=tinker (or service=selfhosted on a server that supports it)"
        )

"""Policies that drive workspace episodes through tinker-cookbook's rollout code.

Scripted (offline, no account): `oracle`, `guess`, `crash`, `wrong`, `edit`; see
`scripted.py`. `model`: a Tinker sampler; see `model.py`.
"""

from piexp.policies.model import build_model_policy
from piexp.policies.observation import Observation, ObservationError, parse_observation
from piexp.policies.scripted import (
    POLICIES,
    CrashPolicy,
    EditPolicy,
    GuessPolicy,
    OraclePolicy,
    ScriptedPolicy,
    WrongPolicy,
    make_policy,
    render_assistant_tokens,
)

__all__ = [
    "POLICIES",
    "CrashPolicy",
    "EditPolicy",
    "GuessPolicy",
    "Observation",
    "ObservationError",
    "OraclePolicy",
    "ScriptedPolicy",
    "WrongPolicy",
    "build_model_policy",
    "make_policy",
    "parse_observation",
    "render_assistant_tokens",
]

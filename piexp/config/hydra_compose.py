"""Compose `conf/config.yaml` with Hydra into the config tree, not yet validated (that is
`piexp.config.compose`, which checks it against the schema): the schema's own defaults
are read from this tree (`piexp.config.defaults`), so composing needs no schema. Hydra's
errors become one `UserError` paragraph.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Iterator, Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

from piexp.config.paths import config_dir
from piexp.config.presets import preset_names, register_presets
from piexp.config.search_path import group_options as search_path_group_options
from piexp.config.search_path import refuse_family_clashes, user_search_path, with_search_path
from piexp.errors import UserError

__all__ = ["compose", "composing_once", "group_options", "hydra_error_to_user_error"]

# Inside `composing_once()`: overrides (with the search path) -> the config they composed
# to, Hydra's node included. None outside it: nothing is kept between commands.
_composed: dict[tuple[str, ...], DictConfig] | None = None


@contextlib.contextmanager
def composing_once() -> Iterator[None]:
    """Within it, `compose` of overrides composed before returns a copy of that config
    instead of composing again. Checking a command composes its overrides three times
    (the sweep a preset declares, the job's config, the folders it will write), each
    about 0.2 s of Hydra reading and merging YAML; a copy takes 0.01 s. Scoped to one
    command's checks, so a config file edited between two commands (or two tests of one
    process) is read again."""
    global _composed
    outer, _composed = _composed, {} if _composed is None else _composed
    try:
        yield
    finally:
        _composed = outer


def group_options(group: str, overrides: Sequence[str] = ()) -> list[str]:
    """The options of a config group: piexp's conf/ and the search path `overrides` give."""
    if group == "experiment":
        return preset_names()
    return search_path_group_options(group, user_search_path(overrides))


_GROUPS = (
    "family", "reward", "limits", "model", "service", "sandbox", "algo", "mode", "languages", "harness", "experiment",
)  # fmt: skip


def hydra_error_to_user_error(error: Exception, overrides: Sequence[str]) -> UserError:
    from hydra.errors import MissingConfigException

    from piexp.config.suggest import unknown_options_hint

    text = str(error).strip()
    if isinstance(error, MissingConfigException):
        for group in _GROUPS:
            if f"'{group}/" in text or f"'{group}'" in text or f" {group}=" in text:
                chosen = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == group]
                hint = unknown_options_hint(group, chosen[-1] if chosen else "", group_options(group, overrides))
                if group == "family":
                    hint += (
                        " A family of your own is a YAML file DIR/family/NAME.yaml naming its code with _target_; "
                        "select it with --config-dir DIR (see docs/families.md)."
                    )
                return UserError(hint)
    first_line = text.splitlines()[0] if text else type(error).__name__
    bad_key = re.match(r"Could not override '([^']+)'", first_line)
    if bad_key:
        elsewhere = _other_mode_hint(bad_key[1], overrides)
        if elsewhere:
            return UserError(elsewhere)
        return UserError(
            f"Unknown key {bad_key[1]!r}: the config has no such option.{_key_hint(bad_key[1], overrides)}"
        )
    return UserError(f"Invalid command-line override: {first_line}")


def _key_hint(key: str, overrides: Sequence[str]) -> str:
    """What an unknown key likely meant, from the keys of the config the command's group
    choices compose (nothing when even those do not compose)."""
    from piexp.config.suggest import config_keys, unknown_key_hint

    choices = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in (*_GROUPS, "hydra.searchpath")]
    try:
        tree = OmegaConf.to_container(compose(choices), resolve=False)
    except UserError:
        return ""
    assert isinstance(tree, dict)
    return unknown_key_hint(key, config_keys(tree), list(tree.get("family") or {}))


# The groups each of whose options is a variant with its own keys, and the key naming it.
_VARIANT_GROUPS = {"mode": "name", "service": "name", "sandbox": "kind", "harness": "name"}


def _other_mode_hint(key: str, overrides: Sequence[str]) -> str:
    """The refusal of a key that another option of its group takes (`mode.max_steps` in an
    eval, `service.tcmalloc` with service=tinker): which option takes it, rather than "no
    such option" (empty when none takes it)."""
    from piexp.config.suggest import config_keys, other_mode_hint

    group = key.split(".", 1)[0]
    if group not in _VARIANT_GROUPS or "." not in key:
        return ""
    tag = _VARIANT_GROUPS[group]
    choices = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in (*_GROUPS, "hydra.searchpath")]
    keys_by_option: dict[str, list[str]] = {}
    current = ""
    try:
        tree = OmegaConf.to_container(compose(choices), resolve=False)
        assert isinstance(tree, dict)
        current = str(tree[group][tag])
        others = [c for c in choices if c.split("=", 1)[0].lstrip("+~") != group]
        for option in group_options(group, overrides):
            option_tree = OmegaConf.to_container(compose([*others, f"{group}={option}"]), resolve=False)
            assert isinstance(option_tree, dict)
            keys_by_option.setdefault(str(option_tree[group][tag]), []).extend(
                config_keys(option_tree[group], f"{group}.")
            )
    except UserError:
        return ""
    return other_mode_hint(key, current, keys_by_option, group=group)


def compose(overrides: Sequence[str], *, with_hydra: bool = False) -> DictConfig:
    """Compose `conf/config.yaml` with the overrides (list rewriting already applied);
    `with_hydra` keeps Hydra's own node (sweeper params, run mode)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_presets()
    overrides = with_search_path(overrides)
    key = (str(config_dir()), *overrides)
    if _composed is not None and key in _composed:
        return _without_hydra(copy.deepcopy(_composed[key]), with_hydra)
    already = GlobalHydra.instance().is_initialized()
    if already:
        # Inside a Hydra job: compose in a fresh context and restore Hydra's afterwards.
        saved = GlobalHydra.instance().hydra
        GlobalHydra.instance().clear()
    failure: Exception | None = None
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            try:
                # Hydra's node is composed either way (hydra.compose only deletes it after).
                cfg = hydra_compose("config", overrides=list(overrides), return_hydra_config=True)
            except Exception as error:  # Hydra raises several unrelated types here.
                failure = error
            else:
                refuse_family_clashes(list(cfg.get("family") or {}), overrides)
                if _composed is not None:
                    _composed[key] = copy.deepcopy(cfg)
                return _without_hydra(cfg, with_hydra)
    finally:
        if already:
            GlobalHydra.instance().initialize(saved)  # type: ignore[arg-type]
    # Converted outside Hydra's context: finding the fix composes the config again.
    raise hydra_error_to_user_error(failure, overrides) from failure


def _without_hydra(cfg: DictConfig, with_hydra: bool) -> DictConfig:
    """`cfg` without Hydra's node unless `with_hydra` (what `hydra.compose` returns)."""
    if not with_hydra and "hydra" in cfg:
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg

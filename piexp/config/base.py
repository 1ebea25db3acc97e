"""What every settings model of the run config is built from: the strict base (a key the
model does not declare is refused, as a misspelt option would otherwise be ignored, and a
validated config is frozen), the base of a tagged union's variants, and the bounded
number types several blocks share."""

from __future__ import annotations

import typing
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["NonNegativeFloat", "StrictSettings", "VariantSettings"]

NonNegativeFloat = Annotated[float, Field(ge=0)]


class StrictSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VariantSettings(StrictSettings):
    """One variant of a config block that is a tagged union (service=local, sandbox=remote),
    holding only the keys it uses. Such a block was once one flat class whose every YAML
    set every key, so a run folder's saved config may hold keys its variant does not use:
    one at the value the old YAML gave it is dropped (the folder still reads), any other
    value is refused, as a setting with no effect must not pass silently.

    The variants of a block subclass one shared base, which declares the keys all of them
    use and sets `GROUP` and `TAG` (the block and its tag key) and `FORMER_DEFAULTS`: each
    key of the old flat block that only some variants have -> the values an old YAML gave
    it (a variant that has the key validates it as its own)."""

    GROUP: ClassVar[str]
    TAG: ClassVar[str]
    FORMER_DEFAULTS: ClassVar[dict[str, tuple[Any, ...]]] = {}

    @model_validator(mode="before")
    @classmethod
    def _keys_of_other_variants(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        kept = {}
        for key, value in data.items():
            if key in cls.model_fields or key not in cls.FORMER_DEFAULTS:
                kept[key] = value  # an unknown key is refused by extra="forbid"
            elif value not in cls.FORMER_DEFAULTS[key]:
                raise ValueError(cls.no_effect(str(key)))
        return kept

    @classmethod
    def tag_value(cls) -> str:
        return str(typing.get_args(cls.model_fields[cls.TAG].annotation)[0])

    @classmethod
    def no_effect(cls, key: str) -> str:
        """The refusal of `key`, a key of other variants of the block, on this one."""
        siblings: list[type] = cls.__mro__[1].__subclasses__()  # the variants of the shared base
        users = [
            f"{cls.GROUP}={variant.tag_value()}"
            for variant in siblings
            if issubclass(variant, VariantSettings) and key in variant.model_fields
        ]
        used = f" (only used with {' or '.join(users)})" if users else ""
        return f"{cls.GROUP}.{key} has no effect with {cls.GROUP}={cls.tag_value()}{used}: drop it"

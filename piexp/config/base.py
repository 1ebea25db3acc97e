"""What every settings model of the run config is built from: the strict base (a key the
model does not declare is refused, as a misspelt option would otherwise be ignored, and a
validated config is frozen) and the bounded number types several blocks share."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["NonNegativeFloat", "StrictSettings"]

NonNegativeFloat = Annotated[float, Field(ge=0)]


class StrictSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

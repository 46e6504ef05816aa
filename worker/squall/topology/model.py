"""What every model of the topology spec has in common (:mod:`squall.topology.spec`,
:mod:`squall.topology.k8s`)."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel


class SpecModel(BaseModel):
    """A part of the topology spec: camelCase keys (snake_case too, in Python), no unknown keys, strict
    types, and no ``.inf`` or ``.nan``."""

    # no .inf or .nan (YAML has both): a wait of .inf never ends, a bound of .nan compares false
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              validate_assignment=True, use_enum_values=True, strict=True, allow_inf_nan=False)

    def to_dict(self) -> dict[str, Any]:
        """The camelCase document this model loads from (the YAML / CR shape)."""
        return self.model_dump(by_alias=True, mode="json")

    @field_validator("*", mode="before")
    @classmethod
    def _no_truth_values_as_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # What the lax mode of Python code (TopologyBuilder) would convert and lose: workers=True is 1,
        # suspended="no" is False. Documents are strict, and refuse them anyway.
        kinds = set(get_args(cls.model_fields[info.field_name].annotation)) or {
            cls.model_fields[info.field_name].annotation}
        if isinstance(value, bool) and bool not in kinds and kinds & {int, float} and str not in kinds:
            raise ValueError("must be a whole number" if int in kinds else "must be a number")
        if isinstance(value, str) and bool in kinds:
            raise ValueError("must be true or false")
        return value

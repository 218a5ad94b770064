"""Tools: plain functions the model may call, wrapped with ``@function_tool``."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..entries import ToolResultEntry
from ..errors import UserError

__all__ = ["Tool", "ToolContext", "function_tool"]


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the call it serves.

    ``run_id`` + ``call_id`` identify the call stably across resumes, which
    makes them the natural idempotency key for side effects; ``turn`` is the
    model turn that asked for it (the same when a resume re-executes it).
    """

    run_id: str
    call_id: str
    turn: int
    deps: Any = None


class Tool:
    """A callable the model can use; build one with ``@function_tool``."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> None:
        self.function = function
        self.name = name or function.__name__
        self.description = description or inspect.getdoc(function) or ""
        parameters = list(inspect.signature(function).parameters.values())
        hints = get_type_hints(function)
        self.takes_context = bool(parameters) and hints.get(parameters[0].name) is ToolContext
        fields: dict[str, Any] = {}
        for parameter in parameters[1:] if self.takes_context else parameters:
            default = ... if parameter.default is inspect.Parameter.empty else parameter.default
            fields[parameter.name] = (hints.get(parameter.name, Any), default)
        self.arguments_model: type[BaseModel] = create_model(
            f"{self.name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments, for a provider's tool list."""
        return self.arguments_model.model_json_schema()

    async def invoke(self, arguments: str, context: ToolContext) -> ToolResultEntry:
        """Run the tool; a bad argument or a raised exception becomes an error result."""
        try:
            parsed = self.arguments_model.model_validate_json(arguments or "{}")
        except ValidationError as exc:
            return _error(context.call_id, f"invalid arguments for {self.name}: {exc}")
        kwargs = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        args = (context,) if self.takes_context else ()
        try:
            value = self.function(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # a tool's failure is the model's to see, not the run's
            return _error(context.call_id, f"{type(exc).__name__}: {exc}")
        return _result(context.call_id, value)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def _error(call_id: str, message: str) -> ToolResultEntry:
    return ToolResultEntry(call_id=call_id, output=message, is_error=True)


def _result(call_id: str, value: Any) -> ToolResultEntry:
    if isinstance(value, str):
        return ToolResultEntry(call_id=call_id, output=value)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        output = json.dumps(value, ensure_ascii=False)
        raw = json.loads(output)
    except (TypeError, ValueError):
        return ToolResultEntry(call_id=call_id, output=str(value))
    return ToolResultEntry(call_id=call_id, output=output, raw=raw)


def function_tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Any:
    """Turn an async or sync function into a ``Tool``.

    Arguments are validated against the function's signature; a first
    parameter annotated ``ToolContext`` receives the call's context.
    """

    def wrap(fn: Callable[..., Any]) -> Tool:
        if not callable(fn):
            raise UserError(f"function_tool wraps a function, not {type(fn).__name__}")
        return Tool(fn, name=name, description=description)

    return wrap(function) if function is not None else wrap

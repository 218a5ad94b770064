"""Tools: plain functions the model may call, wrapped with ``@function_tool``."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ..entries import ToolResultEntry
from ..errors import UserError

__all__ = ["EffectMode", "Tool", "ToolContext", "function_tool"]

T = TypeVar("T")

EffectMode = Literal["at_least_once", "at_most_once", "keyed"]
"""How a tool may be re-run when a crash left its call without a result:

- ``at_least_once`` (default): it runs again; make it idempotent yourself.
- ``at_most_once``: if it had started, it does not run again; the run sees an
  "outcome unknown" error result instead.
- ``keyed``: it runs again with the same ``ToolContext.idempotency_key``, for an
  outside service that deduplicates on it.

In every mode, a call whose outcome was recorded (``ToolContext.transaction``)
gets that outcome back instead of running again.
"""


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the call it serves.

    ``run_id`` + ``call_id`` identify the call stably across resumes, which
    makes them the natural idempotency key for side effects; ``turn`` is the
    model turn that asked for it (the same when a resume re-executes it).
    ``tenant`` is the tenant of the run's stores (``""``: the default one).
    """

    run_id: str
    call_id: str
    turn: int
    deps: Any = None
    _effect: Callable[[Callable[[Any], Any]], Awaitable[Any]] | None = field(
        default=None, repr=False, compare=False
    )
    tenant: str = ""

    @property
    def idempotency_key(self) -> str:
        """Stable across resumes: hand it to an outside service that deduplicates.

        ``run_id:call_id`` in the default tenant. Two tenants' runs may share run and
        call ids, and ids and tenants may hold ``:``, so a named tenant's key is the
        SHA-256 of all three, length-prefixed (64 hex digits, no ``:``): it never
        equals another tenant's key, nor a default tenant's."""
        if not self.tenant:
            return f"{self.run_id}:{self.call_id}"
        parts = (self.tenant, self.run_id, self.call_id)
        encoded = b"".join(len(p.encode()).to_bytes(4, "big") + p.encode() for p in parts)
        return hashlib.sha256(encoded).hexdigest()

    async def transaction(self, work: Callable[[Any], T]) -> T:
        """Run ``work(connection)`` in one transaction on the checkpoint database that
        also records this call's outcome (made from the value ``work`` returns).
        ``work`` is plain synchronous SQLAlchemy Core code on a ``Connection``.

        When the tool's effect is a row in that database, effect and outcome commit
        together: exactly once, across crashes. The tool must return that value.
        """
        if self._effect is None:
            raise UserError("ctx.transaction() needs a run with a SQL checkpointer")
        return await self._effect(work)  # type: ignore[no-any-return]


class Tool:
    """A callable the model can use; build one with ``@function_tool``."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        effect: EffectMode = "at_least_once",
    ) -> None:
        if effect not in get_args(EffectMode):
            raise UserError(
                f"effect must be one of {', '.join(get_args(EffectMode))}, not {effect!r}"
            )
        self.effect = effect
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
            if inspect.iscoroutinefunction(self.function):
                value = await self.function(*args, **kwargs)
            else:
                # A blocking tool must not stall the loop: the run's lease is
                # renewed there while the tool works.
                value = await asyncio.to_thread(self.function, *args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # a tool's failure is the model's to see, not the run's
            return _error(context.call_id, f"{type(exc).__name__}: {exc}")
        return result_entry(context.call_id, value)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def _error(call_id: str, message: str) -> ToolResultEntry:
    return ToolResultEntry(call_id=call_id, output=message, is_error=True)


def result_entry(call_id: str, value: Any) -> ToolResultEntry:
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
    effect: EffectMode = "at_least_once",
) -> Any:
    """Turn an async or sync function into a ``Tool``.

    Arguments are validated against the function's signature; a first
    parameter annotated ``ToolContext`` receives the call's context.
    ``effect`` declares how the tool may be re-run after a crash (``EffectMode``).
    """

    def wrap(fn: Callable[..., Any]) -> Tool:
        if not callable(fn):
            raise UserError(f"function_tool wraps a function, not {type(fn).__name__}")
        return Tool(fn, name=name, description=description, effect=effect)

    return wrap(function) if function is not None else wrap

"""Agents, models and handoffs: the pieces a run is made of."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ..entries import (
    AssistantTextEntry,
    InputEntry,
    ReasoningEntry,
    ToolCallEntry,
    TranscriptEntry,
    Usage,
)
from ..errors import UserError
from .tools import Tool

__all__ = ["Agent", "Model", "ModelTurn", "ScriptedModel", "handoff_tool_name"]

MODEL_OUTPUT = (AssistantTextEntry, ReasoningEntry, ToolCallEntry)


class ModelTurn(BaseModel):
    """What one model call produced: assistant entries (text, reasoning, tool calls)."""

    entries: list[TranscriptEntry]
    usage: Usage = Field(default_factory=Usage)


@runtime_checkable
class Model(Protocol):
    """Any provider: wrap its client in an object with this one method."""

    async def turn(self, transcript: list[TranscriptEntry], tools: Sequence[Tool]) -> ModelTurn: ...


def handoff_tool_name(agent_name: str) -> str:
    return f"transfer_to_{agent_name}"


class Agent:
    """A named model with instructions, tools, and agents it may hand off to.

    Names identify agents in checkpoints, so they must be unique across the
    handoff graph that a run can reach.
    """

    def __init__(
        self,
        name: str,
        model: Model,
        *,
        instructions: str | None = None,
        tools: Sequence[Tool] = (),
        handoffs: Sequence[Agent] = (),
    ) -> None:
        if not isinstance(name, str) or not name:
            raise UserError(f"an agent needs a non-empty name, got {name!r}")
        if not callable(getattr(model, "turn", None)):
            raise UserError(f"agent {name!r}: model must have an async turn() method")
        self.name = name
        self.model = model
        self.instructions = instructions
        self.tools = list(tools)
        self.handoffs = list(handoffs)

    def tool(self, name: str) -> Tool | None:
        return next((tool for tool in self.tools if tool.name == name), None)

    def handoff_target(self, tool_name: str) -> Agent | None:
        return next((a for a in self.handoffs if handoff_tool_name(a.name) == tool_name), None)

    def visible_tools(self) -> list[Tool]:
        """The tools offered to the model, handoffs included as ``transfer_to_<name>``."""
        transfers = [
            Tool(_transfer, name=handoff_tool_name(a.name), description=f"Hand off to {a.name}.")
            for a in self.handoffs
        ]
        return self.tools + transfers

    def reachable(self) -> dict[str, list[Agent]]:
        """Every agent reachable through handoffs, by name (a list when names clash)."""
        found: dict[str, list[Agent]] = {}
        stack: list[Agent] = [self]
        while stack:
            agent = stack.pop()
            same = found.setdefault(agent.name, [])
            if any(a is agent for a in same):
                continue
            same.append(agent)
            stack.extend(agent.handoffs)
        return found

    def __repr__(self) -> str:
        return f"Agent({self.name!r})"


def _transfer() -> str:
    """Placeholder body: the runner applies a handoff itself."""
    return "transferred"


class ScriptedModel:
    """A model that plays a fixed script, for tests and the demo.

    ``play="position"`` (the default) indexes the script by position in the
    conversation: the k-th model turn since the latest user message gets
    ``turns[k]``, so a resumed run (in a fresh process, with a fresh
    ``ScriptedModel``) continues exactly where the crashed one stopped.
    ``play="calls"`` plays the turns in call order, one per call, as lovia's
    ``ScriptedProvider`` pops its queue. ``calls`` counts the turns this
    instance actually played.
    """

    def __init__(
        self,
        turns: Sequence[ModelTurn | Sequence[TranscriptEntry]],
        *,
        play: Literal["position", "calls"] = "position",
    ) -> None:
        if play not in ("position", "calls"):
            raise UserError(f"play must be 'position' or 'calls', not {play!r}")
        self.turns = [t if isinstance(t, ModelTurn) else ModelTurn(entries=list(t)) for t in turns]
        self.play = play
        self.calls = 0

    async def turn(self, transcript: list[TranscriptEntry], tools: Sequence[Tool]) -> ModelTurn:
        index = self.calls if self.play == "calls" else model_turns_since_user(transcript)
        if index >= len(self.turns):
            raise UserError(f"ScriptedModel has {len(self.turns)} turns; turn {index + 1} asked")
        self.calls += 1
        return self.turns[index]


def model_turns_since_user(transcript: Sequence[TranscriptEntry]) -> int:
    """How many model turns follow the latest user message."""
    count = 0
    previous_was_model = False
    for entry in transcript:
        if isinstance(entry, InputEntry) and entry.role == "user":
            count, previous_was_model = 0, False
            continue
        is_model = isinstance(entry, MODEL_OUTPUT)
        if is_model and not previous_was_model:
            count += 1
        previous_was_model = is_model
    return count

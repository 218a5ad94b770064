"""A small, provider-agnostic run loop that carries the storage semantics.

This package is the documented home of the loop's names: ``Agent``,
``Runner`` and ``function_tool`` are also the OpenAI Agents SDK's (and
lovia's), so ``from lovia_store.runs import Runner`` says which one a module
means. ``lovia_store`` re-exports them for compatibility.
"""

from .agent import Agent, Model, ModelTurn, ScriptedModel
from .options import CheckpointOptions
from .runner import MaxTurnsExceeded, Runner, RunResult
from .tools import EffectMode, Tool, ToolContext, function_tool

__all__ = [
    "Agent",
    "CheckpointOptions",
    "EffectMode",
    "MaxTurnsExceeded",
    "Model",
    "ModelTurn",
    "RunResult",
    "Runner",
    "ScriptedModel",
    "Tool",
    "ToolContext",
    "function_tool",
]

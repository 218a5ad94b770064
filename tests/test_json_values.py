"""The fast value check (``is_clean``, run on every append) and the one that explains
a refusal (``explain_refusal``, which ``check_value`` runs when the first says no)
apply the same rules: a value of JSON's own types passes one exactly when it
passes the other. A subclass (an ``IntEnum``, a ``str``
subclass) or another type is left by the fast check to the explaining one, so
there the fast check may only say no where the other says yes, never the reverse."""

from __future__ import annotations

import enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lovia_store import InputEntry, RunHead, ToolResultEntry, Usage, UserError
from lovia_store._json import MAX_DEPTH, check_value, explain_refusal, is_clean


class Level(enum.IntEnum):
    LOW = 1


class Label(str):
    pass


# Text with lone surrogates as well as non-ASCII and plain ASCII characters, joined
# from a list: ``st.text`` leaves surrogates out even when its alphabet draws them.
texts = st.lists(st.one_of(st.characters(), st.sampled_from("\ud800\udfffé数😀")), max_size=8).map(
    "".join
)
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
odd_leaves = st.sampled_from([Level.LOW, Label("x"), b"bytes", {1, 2}, 1j])


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.one_of(texts, st.integers()), children, max_size=4),
        st.builds(
            lambda value: InputEntry(role="user", content="x").model_copy(
                update={"content": value}
            ),
            children,
        ),
        st.builds(
            lambda state: RunHead(agent_name="a").model_copy(
                update={"context_state": {"k": state}}
            ),
            children,
        ),
    )


json_values = st.recursive(json_leaves, _containers, max_leaves=20)
any_values = st.recursive(st.one_of(json_leaves, odd_leaves), _containers, max_leaves=20)


def _check_passes(value: Any, models: bool) -> bool:
    try:
        explain_refusal(value, "value", models=models)
    except UserError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(json_values, st.booleans())
def test_the_fast_check_agrees_with_the_explaining_one(value: Any, models: bool) -> None:
    assert is_clean(value, models=models) == _check_passes(value, models)


@settings(max_examples=300, deadline=None)
@given(any_values, st.booleans())
def test_the_fast_check_never_passes_what_the_other_refuses(value: Any, models: bool) -> None:
    if is_clean(value, models=models):
        assert _check_passes(value, models)


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 10_000])
def test_both_checks_draw_the_depth_line_in_the_same_place(levels: int) -> None:
    value = nested(levels)
    assert is_clean(value) == _check_passes(value, False) == (levels <= MAX_DEPTH)


def test_models_count_as_objects_and_their_fields_are_walked() -> None:
    head = RunHead(agent_name="a", usage=Usage(input_tokens=1))
    assert is_clean(head, models=True)
    assert not is_clean(head, models=False)  # a model is not JSON unless models are walked
    broken = ToolResultEntry(call_id="c", output="ok").model_copy(update={"output": "\ud800"})
    assert not is_clean(broken, models=True)
    with pytest.raises(UserError, match="lone surrogate"):
        check_value(broken, "entry", models=True)

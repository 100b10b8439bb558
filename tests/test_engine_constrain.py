"""The call constraint, checked with xgrammar's own matcher over the embedded model's tokenizer: it admits
reasoning plus one well-formed call of a known tool, and nothing else. No engine is started here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.engine.constrain import call_prefix, literal_regex, structural_tag, structural_tag_json
from tools import default_tools, tool_specs

SPECS = tool_specs(default_tools())


@pytest.fixture(scope="module")
def accepts(embedded_model: Path):
    """A function telling whether the constraint admits a whole answer (then end of sequence)."""
    import xgrammar as xgr
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(embedded_model)
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer))
    compiled = compiler.compile_structural_tag(structural_tag_json(SPECS))

    def check(text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        return matcher.accept_string(text) and matcher.accept_token(tokenizer.eos_token_id) and matcher.is_terminated()

    return check


@pytest.mark.parametrize("answer", [
    '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>',
    'Read it first.\n'
    '<tool_call>{"name": "read_file", "arguments": {"path": "calc/ops.py", "start_line": 2}}</tool_call>',
    '<tool_call>{"name": "finish", "arguments": {"summary": "add now adds"}}</tool_call>',
    '<tool_call>{"name": "edit_file", "arguments": {"path": "a.py", "old": "a - b", "new": "a + b"}}</tool_call>',
])
def test_well_formed_calls_are_admitted(accepts, answer: str) -> None:
    assert accepts(answer)


@pytest.mark.parametrize("answer", [
    "The answer is 5.",  # no call at all
    '<tool_call>{"name": "teleport", "arguments": {}}</tool_call>',  # unknown tool
    '<tool_call>{"name": "read_file", "arguments": {}}</tool_call>',  # required argument missing
    '<tool_call>{"name": "read_file", "arguments": {"path": 3}}</tool_call>',  # wrong type
    '<tool_call>{"name": "read_file", "arguments": {"path": "a", "mode": "x"}}</tool_call>',  # unknown argument
    '<tool_call>{"name": "list_files", "arguments": {}}</tool_call>\nand more',  # text after the call
    '<tool_call>{"name": "list_files", "arguments": {}}</tool_call><tool_call>{"name": "list_files", '
    '"arguments": {}}</tool_call>',  # a second call
    # the stop string anywhere before the call's end would stop decoding with no call (seen in CI)
    '<tool_result>ok</tool_call>\n<tool_call>{"name": "list_files", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "finish", "arguments": {"summary": "done</tool_call>"}}</tool_call>',
])
def test_anything_else_is_refused(accepts, answer: str) -> None:
    assert not accepts(answer)


def test_reasoning_is_bounded_and_calls_start_as_the_prompt_teaches() -> None:
    tag = structural_tag(SPECS, reasoning_tokens=12)
    reasoning = tag["format"]["elements"][0]
    assert reasoning["content"] == {"type": "any_text", "max_tokens": 12, "excludes": ["</tool_call>"]}
    assert reasoning["end"] == "<tool_call>"
    assert call_prefix("read_file") == '{"name": "read_file", "arguments": '
    with pytest.raises(ValueError):
        structural_tag([])


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"),
               max_size=60))
@settings(max_examples=200, deadline=None)
def test_a_forced_answer_regex_is_the_text_and_nothing_else(text: str) -> None:
    import xgrammar as xgr

    pattern = literal_regex(text)
    assert re.fullmatch(pattern, text, flags=re.DOTALL)
    assert str(xgr.Grammar.from_regex(pattern)) == str(xgr.Grammar.from_regex(re.escape(text)))


def test_forcing_a_recorded_answer_draws_no_regex_warnings(capfd) -> None:
    import xgrammar as xgr

    answer = ('I will run the tests.\n'
              '<tool_call>{"name": "run_tests", "arguments": {"command": "pytest -q #1 ~x"}}</tool_call>')
    xgr.Grammar.from_regex(literal_regex(answer))
    assert "Warning" not in capfd.readouterr().err  # re.escape's '\ ', '\#', '\~' drew one line each

"""The call policy on its own: what may reach BFCL's executor and decoder (no worker, no bfcl_eval)."""

from __future__ import annotations

import sys

import pytest

from kit.workloads.bfcl.call_policy import (
    REFUSED_STAND_IN,
    TOOL_ERROR,
    Refusal,
    call_refusal,
    decoder_refusal,
    refusals,
)

METHODS = {"GorillaFileSystem": frozenset({"ls", "cd", "pwd", "mkdir"}),
           "TwitterAPI": frozenset({"post_tweet"})}


@pytest.mark.parametrize("call", [
    "ls()", "ls(a=True)", "cd(folder='document')", "post_tweet(content='hi ls(', tags=['#a'], mentions=[])",
    "GorillaFileSystem.ls(a=False)", "mkdir(dir_name='x y')", "ls(True)",
    "cd(folder={'k': {'j': 1}, 'n': None, 'f': -1.5, 't': (1, 2), 's': {1, 2}})", " ls() ",
])
def test_calls_to_public_methods_with_literal_arguments_are_allowed(call):
    assert call_refusal(call, METHODS) is None


@pytest.mark.parametrize("call, reason", [
    # names the executor's module has in scope, or that do not exist: Python's own NameError text
    ("inspect.os.system(command='id > FILE')", "name 'inspect' is not defined"),
    ("__import__('os').system('id')", "name '__import__' is not defined"),
    ("os.remove(path='/etc/passwd')", "name 'os' is not defined"),
    ("open(file='FILE', mode='w')", "name 'open' is not defined"),
    ("importlib.import_module(name='os')", "name 'importlib' is not defined"),
    ("exec('import os')", "name 'exec' is not defined"),
    ("foo(x=1)", "name 'foo' is not defined"),
    # classes and methods outside the episode
    ("TravelAPI.book_flight(card_id='1')", "name 'TravelAPI' is not defined"),
    ("get_flight_cost(travel_from='SFO')", "name 'get_flight_cost' is not defined"),
    # private and dunder methods
    ("_load_scenario(scenario={})", "name '_load_scenario' is not defined"),
    ("GorillaFileSystem._load_scenario(scenario={})", "GorillaFileSystem has no public method '_load_scenario'"),
    ("GorillaFileSystem.__init__()", "GorillaFileSystem has no public method '__init__'"),
    ("GorillaFileSystem.rm(file_name='a')", "GorillaFileSystem has no public method 'rm'"),
    # attribute chains and other callees
    ("GorillaFileSystem.ls.__func__()", "only method(...) or Class.method(...) may be called"),
    ("ls.__globals__['inspect'].os.system('id')", "only method(...) or Class.method(...) may be called"),
    ("(lambda: 0)()", "only method(...) or Class.method(...) may be called"),
    # arguments that are not literals
    ("f(x=os.getcwd())", "name 'f' is not defined"),
    ("ls(a=os.getcwd())", "name 'os' is not defined"),
    ("cd(folder=document)", "name 'document' is not defined"),
    ("cd(folder=pwd())", "argument 'folder' is not a literal"),
    ("ls(a=set())", "name 'set' is not defined"),
    ("ls(a=1 + 2)", "argument 'a' is not a literal"),
    ("ls(a=lambda: 0)", "argument 'a' is not a literal"),
    ("ls(pwd())", "a positional argument is not a literal"),
    ("ls(*[True])", "argument unpacking"),
    ("ls(**{'a': True})", "argument unpacking"),
    # not one call
    ("ls", "not a single function call"),
    ("[ls()]", "not a single function call"),
    ("ls(); pwd()", "not a Python call"),
    ("ls(", "not a Python call"),
    (3, "not a call string"),
])
def test_everything_else_is_refused_with_a_reason(call, reason):
    found = call_refusal(call, METHODS)
    assert found is not None and found.startswith(reason), found


def test_refusals_keep_the_index_and_read_as_bfcl_tool_errors():
    found = refusals(["ls()", "foo(x=1)", "pwd()", "open('x')"], METHODS)
    assert [(r.index, r.call) for r in found] == [(1, "foo(x=1)"), (3, "open('x')")]
    # the exact text BFCL's executor gives a call that raised NameError
    assert found[0].tool_result == "Error during execution: name 'foo' is not defined"
    assert TOOL_ERROR.format("x") == "Error during execution: x"
    assert Refusal.from_json(found[1].as_json()) == found[1]


def test_the_scoring_stand_in_is_itself_refused_and_calls_nothing_real():
    assert call_refusal(REFUSED_STAND_IN, METHODS) == "name 'kit_refused_call' is not defined"


def test_a_private_name_is_never_allowed_even_if_listed():
    assert call_refusal("_hidden()", {"C": frozenset({"_hidden"})}) is not None


@pytest.mark.parametrize("text", [
    "[ls(a=True)]", "```\n[cd(folder='x')]\n```", "[ls(a=1 + 2)]", "[cd(folder='a' * 3)]", "[ls(a=[-1, 2 ** 3])]",
    "Sure, I can help.", "[ls(", "[ls(1 + x)]",  # positional values are not decoded; prose does not parse
    "[ls(a=g(y + 1))]",  # a call without keywords is unparsed to text, not evaluated
])
def test_text_the_decoder_would_not_eval_goes_to_the_decoder(text):
    assert decoder_refusal(text) is None


@pytest.mark.parametrize("text", [
    "[ls(a=__import__('os').system('id') + 0)]",
    "ls(a=x + 1)",
    "[ls(a=[open('f', 'w') + 1])]",
    "[ls(a={'k': inspect.os.getcwd() + ''})]",
    "[cd(folder=f(b=y + 1))]",
    "[pwd(), ls(a=(os.system('id') or 0) * 1)]",
])
def test_text_the_decoder_would_eval_is_refused(text):
    found = decoder_refusal(text)
    assert found and "not literal arithmetic" in found


def test_the_policy_does_not_import_bfcl():
    assert not any(name == "bfcl_eval" or name.startswith("bfcl_eval.") for name in sys.modules)

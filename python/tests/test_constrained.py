"""Constrained output: whatever the seed, every output parses and validates."""

from __future__ import annotations

import json
import re

import pytest

SEEDS = [1, 2, 3, 4, 5]


@pytest.mark.parametrize("seed", SEEDS)
def test_gbnf(model, seed):
    grammar = 'root ::= "The answer is " [1-9] [0-9]? "." (" " word)?\nword ::= [a-z]+'
    c = model.generate("Q: what is six times seven?\nA:", max_tokens=24, seed=seed,
                       temperature=1.0, grammar=grammar)
    assert re.fullmatch(r"The answer is [1-9][0-9]?\.( [a-z]+)?", c.text), c.text


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("seed", SEEDS)
def test_json_schema(model, seed):
    c = model.generate("Once upon a time", max_tokens=96, seed=seed, temperature=1.0,
                       json_schema=SCHEMA)
    doc = json.loads(c.text)
    assert set(doc) <= {"name", "age", "pets"} and {"name", "age"} <= set(doc)
    assert isinstance(doc["name"], str) and 1 <= len(doc["name"]) <= 12
    assert isinstance(doc["age"], int) and 0 <= doc["age"] <= 120
    assert all(p in ("cat", "dog") for p in doc.get("pets", [])) and len(doc.get("pets", [])) <= 3


def test_json_schema_as_text(model):
    c = model.generate("x", max_tokens=96, seed=9, json_schema=json.dumps(SCHEMA))
    assert {"name", "age"} <= set(json.loads(c.text))


@pytest.mark.parametrize("seed", SEEDS)
def test_any_json_object(model, seed):
    c = model.generate("Once upon a time", max_tokens=48, seed=seed, json=True,
                       json_whitespace=1)
    assert isinstance(json.loads(c.text), dict), c.text


@pytest.mark.parametrize("seed", SEEDS)
def test_regex(model, seed):
    c = model.generate("Her phone number is", max_tokens=20, seed=seed,
                       regex=r"\(\d{3}\) \d{3}-\d{4}")
    assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", c.text), c.text


@pytest.mark.parametrize("seed", SEEDS)
def test_choices(model, seed):
    choices = ["red ball", "blue car", "green tree"]
    c = model.generate("Lily saw a", max_tokens=8, seed=seed, choices=choices)
    assert c.text in choices


def test_stream_with_grammar(model):
    stream = model.stream("Lily saw a", max_tokens=20, seed=3, json_schema=SCHEMA)
    text = "".join(stream)
    assert json.loads(text) == json.loads(stream.result.text)

"""The redaction rules' cue screen (recalld.ingest.sessions.cues) against plain substring tests."""

from __future__ import annotations

import random

from recalld.ingest.sessions import redaction
from recalld.ingest.sessions.cues import Cues


def _plain(needles: list[tuple[str, ...]], text: str, after: int = -1) -> list[int]:
    return [i for i, rule in enumerate(needles) if i > after and any(n in text for n in rule)]


def test_each_rule_whose_needle_is_in_the_text_in_order() -> None:
    needles = [("sk-ant-",), ("sk-",), ("ghp_", "gho_"), ("xox",)]
    cues = Cues(needles)
    assert cues.due("nothing here") == []
    # "sk-" inside "sk-ant-" is a cue for its own rule too (overlapping matches)
    assert cues.due("key sk-ant-abc") == [0, 1]
    assert cues.due("gho_x then xoxb") == [2, 3]
    assert cues.due("gho_x then xoxb", after=2) == [3]
    assert cues.every(after=1) == [2, 3]


def test_bytes_needles_on_folded_text() -> None:
    cues = Cues([(b"secret",), (b"--",), (b"pass", b"key")])
    assert cues.due(b"my--password") == [1, 2]
    assert cues.due(b"---") == [1]


def test_the_screen_agrees_with_substring_tests_on_random_text() -> None:
    needles = [rule.needles for rule, _ in redaction._SUBS]
    cues = Cues(needles)
    pieces = [n for rule in needles for n in rule] + ["a", " ", "-", "_", "K", "\n", "é"]
    rng = random.Random(3)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 12)))
        after = rng.randrange(-1, len(needles))
        assert cues.due(text, after) == _plain(needles, text, after), text


def _subs_screened_by_substrings(text: str) -> str:
    """The token rules as they ran before the screen: each tested on the text as it is by then."""
    for rule, sub in redaction._SUBS:
        if any(n in text for n in rule.needles):
            text = rule.regex.sub(sub, text)
    return text


def test_token_rules_redact_as_with_substring_tests() -> None:
    needles = [n for rule, _ in redaction._SUBS for n in rule.needles]
    rng = random.Random(5)
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    redacted = 0
    for _ in range(2000):
        parts = []
        for _ in range(rng.randrange(1, 6)):
            run = "".join(rng.choice(alnum) for _ in range(rng.randrange(4, 48)))
            parts.append(rng.choice(needles) + run if rng.random() < 0.7 else run)
        text = rng.choice([" ", "\n", "/", "="]).join(parts)
        out = redaction._run_subs(text, True)
        assert out == _subs_screened_by_substrings(text), text
        redacted += out != text
    assert redacted > 200  # the texts do hold secrets the rules take

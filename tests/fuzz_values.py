"""Hostile values shared by the fuzz suites (tests/test_fuzz_*.py): what an adversary or an unlucky paste puts
where devenv expects a name, a number or a path. CANARY is replaced by a per-run file that must never appear."""

from __future__ import annotations

import os

from hypothesis import settings
from hypothesis import strategies as st

CANARY = "@CANARY@"

HOSTILE = [
    "-oProxyCommand=touch @CANARY@", "-oLocalCommand=touch @CANARY@", "-F/dev/null", "-", "--", "-x",
    "box\nMatch exec \"touch @CANARY@\"", "box\rHost *", "a\x00b", "\x1b[2J", "a\u2028b", "\u202egnp.exe",
    "$(touch @CANARY@)", "`touch @CANARY@`", "a;touch @CANARY@", "a|touch @CANARY@", "a && touch @CANARY@",
    "' ; touch @CANARY@ ; '", '"', "'", "#", "a b", "%h", "%%", "../..", "../../etc", "/etc/passwd", "/dev/zero",
    "~", "~root/.ssh/id_rsa", "", " ", "a" * 300, "a." * 130, "٣", "²", "１２", "9" * 5000, "nan", "inf", "-inf",
    "1e300", "-1", "0", "0x10", "1_000", "NaN", ".nan", ".inf", "true", "null", "~", "[]", "{}", "*", "?",
    "a@b@c", "user@", "@host", "[::1]:22", "[zz]:1", "h:99999", "h:0", "@lab", "@", "host:٢٢",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----",
]

# YAML fragments that are not plain values: tags, anchors, merge keys, flow soup
YAML_SOUP = [
    "!!python/object/apply:os.system ['touch @CANARY@']", "!secret x", "!!binary aGk=", "&a [*a]", "*undefined",
    "<<: {a: 1}", "!!str", "{a: [b, {c: d}]}", "[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]", "|\n  multi\n  line",
    ">-\n  folded", "'unterminated", "\"\\x00\"", "\"\\u0000\"", "? complex\n: key", "!!float nan", "!!int 0o17",
    "2001-01-01", "0o17", "+.inf",
]


def hostile_text() -> st.SearchStrategy[str]:
    """A hostile fragment, a random string, or the two glued together."""
    pool = st.sampled_from(HOSTILE)
    return st.one_of(pool, st.text(max_size=40), st.tuples(pool, st.text(max_size=10), pool).map("".join))


def scalar() -> st.SearchStrategy[object]:
    """Anything YAML can hold as a value."""
    return st.one_of(hostile_text(), st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
                     st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                     st.lists(hostile_text(), max_size=3),
                     st.dictionaries(hostile_text(), hostile_text(), max_size=2))


def examples(share: float = 1.0, override: str = "DEVENV_FUZZ_EXAMPLES") -> int:
    """max_examples for a property test: share of the run's budget, the hypothesis profile's max_examples
    (tests/conftest.py: 400 in a full run, 150 in `scripts/test --quick`); the environment variable override,
    when set, is the budget instead (DEVENV_FUZZ_EXAMPLES=5000 for a long hunt)."""
    budget = int(os.environ.get(override) or settings.default.max_examples)
    return max(1, round(budget * share))

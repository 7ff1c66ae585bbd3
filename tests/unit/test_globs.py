"""``policy/globs.overlap``: whether two model globs can match one name (pools may not share a
model). The first rows are the overlaps the old check (each pattern tried as a name against
the other) let through, found by testing pools as an operator would."""

from __future__ import annotations

import fnmatch
from fnmatch import fnmatchcase

import pytest

from gateway.policy.globs import overlap
from gateway.policy.globs import problem as problem_of


@pytest.mark.parametrize(("a", "b", "both"), [
    ("*-mini", "gpt-*", "gpt-4o-mini"), ("gpt-4o?mini", "gpt-4o-*", "gpt-4o-mini"), ("a*b", "*c*", "acb"),
    ("gpt-*", "*", "gpt-4o"), ("claude-[sh]*", "claude-sonnet-4", "claude-sonnet-4"), ("gpt-4o*", "gpt-4o", "gpt-4o"),
    ("[!a]x", "bx", "bx"), ("*[0-9]", "x*", "x1"), ("claude-*-4-5", "*sonnet*", "claude-sonnet-4-5"),
])  # fmt: skip
def test_globs_that_share_a_name_overlap(a: str, b: str, both: str) -> None:
    assert fnmatchcase(both, a) and fnmatchcase(both, b)  # the witness is real
    assert overlap(a, b) and overlap(b, a)


@pytest.mark.parametrize(("a", "b"), [
    ("gpt-*", "claude-*"), ("claude-sonnet-*", "claude-opus-*"), ("gpt-4o", "gpt-4o-mini"), ("[!a]*", "a*"),
    ("x[0-9]", "x[a-z]"), ("x?", "x"), ("*-mini", "*-nano"),
])  # fmt: skip
def test_globs_that_share_no_name_do_not(a: str, b: str) -> None:
    assert not overlap(a, b) and not overlap(b, a)


def test_against_brute_force_on_a_small_alphabet() -> None:
    """Every pair of short globs over {a, b}, against every name of up to 5 letters."""
    import itertools

    parts = ["a", "b", "?", "*", "[ab]", "[!a]"]
    globs = ["".join(p) for n in range(1, 4) for p in itertools.product(parts, repeat=n)]
    names = ["".join(p) for n in range(0, 6) for p in itertools.product("ab", repeat=n)]
    matched = {g: {s for s in names if fnmatchcase(s, g)} for g in globs}
    for g, h in itertools.combinations(globs, 2):
        if matched[g] & matched[h]:
            assert overlap(g, h), (g, h)
        elif not overlap(g, h):
            continue
        else:  # an overlap only on longer names: check one exists
            longer = ["".join(p) for n in range(6, 9) for p in itertools.product("ab", repeat=n)]
            assert any(fnmatchcase(s, g) and fnmatchcase(s, h) for s in longer), (g, h)


@pytest.mark.parametrize(("glob", "said"), [
    ("gpt-[4", "no ']' closes the '[' at character 5"), ("o[13", "no ']' closes the '[' at character 2"),
    ("[!]", "no ']' closes the '[' at character 1"), ("x[a]y[b", "no ']' closes the '[' at character 6"),
    ("claude-[9-0]*", "the range 9-0 runs backwards, so fnmatch drops it (write 0-9)"),
])  # fmt: skip
def test_a_glob_fnmatch_reads_otherwise_than_written_is_a_problem(glob: str, said: str) -> None:
    problem = problem_of(glob)
    assert problem is not None and said in problem
    assert not fnmatchcase(glob.replace("[", "").replace("]", ""), glob)  # nor means what it seemed to


@pytest.mark.parametrize("glob", ["*", "gpt-4o*", "gpt-[45]*", "[[]x", "[]]", "[!]]", "[a-]", "claude-[!a]*", "x]",
                                  "[[]]"])  # fmt: skip
def test_a_glob_that_means_what_it_says_is_none(glob: str) -> None:
    """Read by fnmatch as written: ``[[]`` is the class of ``[`` (the literal a problem
    suggests), a ``]`` first in a class is a member, a ``]`` outside one a literal."""
    assert problem_of(glob) is None
    assert r"\[" not in fnmatch.translate(glob).replace(r"[\[]", "")  # fnmatch took no '[' literally


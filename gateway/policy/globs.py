"""Whether two model-name globs (``fnmatch``'s: ``*``, ``?``, ``[seq]``, ``[!seq]``) can match
one name: the check behind "no two pools may claim the same model"; and whether a glob is the
one its writer meant (``problem``), checked at load.

Trying each pattern as a name against the other misses most overlaps (``*-mini`` and ``gpt-*``
both match ``gpt-4o-mini``; neither matches the other as a name). This walks both patterns at
once, as a product of the two automata: a name both match exists when the two can reach their
ends together, each step consuming one character both allow (or a ``*`` consuming nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

_WIDEST_CLASS = 4096  # a range wider than this is taken as "any character"


@dataclass(frozen=True, slots=True)
class _Token:
    star: bool = False
    chars: frozenset[str] | None = None  # None: any character
    negated: bool = False  # ``chars`` are the ones it does not allow


def overlap(a: str, b: str) -> bool:
    """Whether some string matches both globs."""
    x, y = _tokens(a), _tokens(b)
    seen: set[tuple[int, int]] = set()
    todo = [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(x) and j == len(y):
            return True
        if i < len(x) and x[i].star:
            todo.append((i + 1, j))  # the star matches nothing more
        if j < len(y) and y[j].star:
            todo.append((i, j + 1))
        if i < len(x) and j < len(y) and _meet(x[i], y[j]):
            # One character both allow; a star stays to match more.
            todo.append((i if x[i].star else i + 1, j if y[j].star else j + 1))
    return False


def _meet(s: _Token, t: _Token) -> bool:
    if s.chars is None or t.chars is None:
        other = t if s.chars is None else s
        return other.chars is None or other.negated or bool(other.chars)
    if s.negated and t.negated:
        return True  # two exclusions leave most characters
    if s.negated:
        return bool(t.chars - s.chars)
    if t.negated:
        return bool(s.chars - t.chars)
    return bool(s.chars & t.chars)


def _tokens(pattern: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not (out and out[-1].star):
                out.append(_Token(star=True))
        elif c == "?":
            out.append(_Token())
        elif c == "[":
            token, i = _class(pattern, i)
            out.append(token)
        else:
            out.append(_Token(chars=frozenset(c)))
    return out


def problem(pattern: str) -> str | None:
    """Why ``pattern`` does not match what it reads as, or None. fnmatch refuses no pattern: a
    ``[`` that no ``]`` closes is a literal ``[`` (``gpt-[4`` matches the name ``gpt-[4`` alone,
    never ``gpt-4``), and a range written backwards (``[9-0]``) is dropped, so a class of only
    such ranges matches nothing."""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c != "[":
            continue
        j = _class_end(pattern, i)
        if j is None:
            return (f"{pattern!r}: no ']' closes the '[' at character {i}, so fnmatch reads it as a literal "
                    "'[' and the pattern matches no name it means (write [[] for a literal '[')")
        for lo, hi in _ranges(pattern[i:j].removeprefix("!")):
            if hi < lo:
                return (f"{pattern!r}: the range {lo}-{hi} runs backwards, so fnmatch drops it "
                        f"(write {hi}-{lo})")
        i = j + 1
    return None


def _class_end(pattern: str, i: int) -> int | None:
    """Where the ``]`` that closes the class opened just before ``i`` is, as fnmatch finds it
    (a ``]`` first in the class, after any ``!``, is a member); None: nothing closes it."""
    j = i
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    j = pattern.find("]", j)
    return None if j < 0 else j


def _ranges(body: str) -> list[tuple[str, str]]:
    """The ``a-z`` ranges of a class's body (its ``!`` taken off)."""
    out, k = [], 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            out.append((body[k], body[k + 2]))
            k += 3
        else:
            k += 1
    return out


def _class(pattern: str, i: int) -> tuple[_Token, int]:
    """``[...]`` from just after its ``[``, as fnmatch reads it; an unclosed ``[`` is a literal."""
    j = _class_end(pattern, i)
    if j is None:
        return _Token(chars=frozenset("[")), i
    body, end = pattern[i:j], j + 1
    negated = body.startswith("!")
    body = body[1:] if negated else body
    chars: set[str] = set()
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            lo, hi = ord(body[k]), ord(body[k + 2])
            if hi - lo > _WIDEST_CLASS:
                return _Token(), end  # taken as any character: an overlap is never missed for it
            chars.update(chr(o) for o in range(lo, hi + 1))
            k += 3
        else:
            chars.add(body[k])
            k += 1
    return _Token(chars=frozenset(chars), negated=negated), end

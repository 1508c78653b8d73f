"""What a regex's matches must contain: the literals behind the log classifier's prefilter.

Searching a 64 KiB tail with every catalog pattern is the classifier's whole cost, and most
patterns cannot match most tails. Each top-level alternative of a pattern names literals of
which every one of its matches contains one (``required_literals``): a run of literal characters,
or one literal of each alternative of a group no match can skip (``(?:exit code|EXIT STATUS: )139``
is gated by its words, not by the digits every log's numbers hold). A run of letters of each
literal (``letter_key``) is looked up in the tail's distinct words before the literal itself is
searched; an alternative whose literals are all absent is skipped. ``(?i)`` patterns are rewritten to match
an ASCII-lowered copy of the text (``lowercase_regex``), which ``re`` searches several times
faster than with IGNORECASE. The analysis is sound, not complete: where it cannot name a literal,
the alternative is always searched.
"""

from __future__ import annotations

import re

ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def lowercase_regex(regex: str) -> str:
    """Rewrite a case-insensitive regex to match ASCII-lowered text case-sensitively.

    Python's ``re`` is several times slower with IGNORECASE, so ``(?i)`` patterns are searched
    in a lowered copy of the text instead. Literal letters are lowered; escapes (``\\S``,
    ``\\d``), group names and backreferences are kept as written.
    """
    body = regex[4:] if regex.startswith("(?i)") else regex
    out: list[str] = []
    i = 0
    while i < len(body):
        if body[i] == "\\":
            step = escape_length(body, i)
            code = body[i: i + step]
            if _HEX_ESCAPE.fullmatch(code) and "A" <= chr(int(code[2:], 16)) <= "Z":
                code = chr(int(code[2:], 16)).lower()  # ``\x41`` is an ``A``, lowered as the text is
            out.append(code)
            i += step
        elif body.startswith("(?P<", i) or body.startswith("(?P=", i):
            end = body.index(">" if body[i + 3] == "<" else ")", i)
            out.append(body[i: end + 1])
            i = end + 1
        else:
            out.append(body[i].lower())
            i += 1
    return "".join(out)


_META = set(".^$*+?{}[]|()")
# Escapes longer than a backslash and one character: ``\x27``, ``\u00e9``, ``\U0001f600``.
_CODE_POINT = {"x": 4, "u": 6, "U": 10}
_HEX_ESCAPE = re.compile(r"\\x[0-9A-Fa-f]{2}")


def escape_length(regex: str, i: int) -> int:
    """How many characters the escape at ``regex[i]`` (a backslash) spans: its hex digits are
    part of it, not text a match contains (``\\x27s`` must not require ``27s``)."""
    nxt = regex[i + 1: i + 2]
    if nxt in _CODE_POINT:
        return _CODE_POINT[nxt]
    if nxt == "N" and regex[i + 2: i + 3] == "{" and (close := regex.find("}", i)) > 0:
        return close - i + 1  # a named character, ``\N{BULLET}``
    if nxt == "0":  # an octal escape: up to two more octal digits
        j = i + 2
        while j < min(i + 4, len(regex)) and regex[j] in "01234567":
            j += 1
        return j - i
    return 2


def alternatives(regex: str) -> list[str]:
    """Split a regex at its top-level ``|``."""
    parts, depth, in_class, start, i = [], 0, False, 0, 0
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(regex[start:i])
            start = i + 1
        i += 1
    parts.append(regex[start:])
    return parts


def _group_end(regex: str, i: int) -> int:
    """The index of the ``)`` that closes the group opening at ``regex[i]`` (-1 if none)."""
    depth, in_class = 0, False
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            i += escape_length(regex, i)
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _group_body(regex: str, i: int, close: int) -> str | None:
    """The text between a group's opening at ``regex[i]`` and its ``)``, for a group whose text a
    match holds as written: plain, non-capturing and named groups. None for lookarounds (their
    text is not consumed), conditionals, comments and inline flags (``(?i:...)`` matches text
    whose case differs from the literal's)."""
    if not regex.startswith("(?", i):
        return regex[i + 1: close]
    if regex.startswith("(?:", i):
        return regex[i + 3: close]
    named = _NAMED_GROUP.match(regex, i)
    return regex[named.end(): close] if named else None


_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


def _requirements(alternative: str, minimum: int) -> list[tuple[str, ...]]:
    """Sets of literals of which every match of ``alternative`` holds one: each run of literal
    characters outside groups (a set of one), and each group a match cannot skip (a literal of
    each of its alternatives, found the same way)."""
    found: list[tuple[str, ...]] = []
    run, in_class, i = "", False, 0

    def end_run() -> None:
        nonlocal run
        if len(run) >= minimum:
            found.append((run,))
        run = ""

    while i < len(alternative):
        c = alternative[i]
        nxt = alternative[i + 1] if i + 1 < len(alternative) else ""
        if in_class:
            in_class = c != "]"
            i += 1 if c != "\\" else 2
            continue
        if c == "(":
            end_run()
            close = _group_end(alternative, i)
            if close < 0:
                break
            follower = alternative[close + 1: close + 2]
            body = _group_body(alternative, i, close)
            if body is not None and follower not in ("?", "*", "{"):
                inner = required_literals(body, minimum)
                if inner:
                    found.append(inner)
            i = close + 1
            continue
        if c == "\\":
            literal = nxt if nxt and not nxt.isalnum() else None
            step = escape_length(alternative, i)
        elif c in _META:
            literal, step = None, 1
            if c == "[":
                in_class = True
            elif c == "{":
                # A counted repetition ("{0,3}"): its digits are not text the match contains.
                close = alternative.find("}", i)
                step = close - i + 1 if close > i else 1
        else:
            literal, step = c, 1
        follower = alternative[i + step] if i + step < len(alternative) else ""
        if literal is None:
            end_run()
        elif follower in ("?", "*", "{"):
            end_run()  # the quantified character is optional
        else:
            run += literal
            if follower == "+":
                end_run()
        i += step
    end_run()
    return found


def _selectivity(literals: tuple[str, ...]) -> tuple[bool, int]:
    """How rarely a tail holds one of ``literals`` by chance: a set whose every literal has a
    word of three letters or more beats one of digits and punctuation (a log's numbers hold
    ``139`` far more often than its words hold ``exit``), then the shortest literal decides."""
    return all(len(letter_key(literal)[0]) >= 3 for literal in literals), min(map(len, literals))


def required_literals(regex: str, minimum: int = 3) -> tuple[str, ...] | None:
    """Literals of which every match contains at least one, or None if no such set is known.

    A sound prefilter: a text holding none of them cannot match, so the regex is skipped.
    """
    literals: list[str] = []
    for alternative in alternatives(regex):
        candidates = _requirements(alternative, minimum)
        if not candidates:
            return None
        literals.extend(max(candidates, key=_selectivity))
    return tuple(dict.fromkeys(literals))


LETTERS = re.compile(r"[a-z]+")
# A regex whose alternatives cannot be searched apart: backreferences (named or numbered) and
# global inline flags would lose their meaning in a part.
UNSPLITTABLE = re.compile(r"\(\?P=|\\[1-9]|^\(\?[aiLmsux]+\)")


def letter_key(literal: str) -> tuple[str, bool]:
    """A run of ASCII letters (lowered) that every text holding the literal holds, and whether
    it is a whole word there.

    A run with a non-letter on both sides inside the literal is a whole word of any text that
    holds the literal (a set lookup); a run at the literal's edge may be part of a longer word
    (a substring check). The longest whole word of three letters or more is preferred.
    """
    lowered = literal.translate(ASCII_LOWER)
    runs = [(m.group(), 0 < m.start() and m.end() < len(lowered)) for m in LETTERS.finditer(lowered)]
    whole = [run for run, bounded in runs if bounded and len(run) >= 3]
    if whole:
        return max(whole, key=len), True
    return max((run for run, _ in runs), key=len, default=""), False

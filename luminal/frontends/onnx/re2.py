"""RegexFullMatch's patterns: RE2 syntax (what the ONNX spec and onnxruntime use) run by Python's `re`.

The two engines share most of the syntax; where they differ the pattern is rewritten so that
Python matches what RE2 matches, and a construct only one of them has is refused with a
`RegexSyntaxError` naming it (RE2 would reject a Python-only one, so would onnxruntime):
- RE2's `\\d \\w \\s \\b` are ASCII (`\\s` is [\\t\\n\\f\\r ], without Python's \\v), Python's
  are Unicode: spelled out as ASCII sets; RE2's case folding (`(?i)`) stays Unicode, as Python's.
- `$` without the m flag is the end of the text in RE2, Python's also matches before a final
  newline: `\\Z`. RE2's `\\z` is Python's `\\Z`; RE2 has no `\\Z`.
- A flag group in mid-pattern (`a(?i)b`) applies to the rest of its group in RE2; Python 3.11
  allows global flags only at the start, so it becomes a scoped group up to the end of the
  enclosing group (reopened after each `|`).
- `(?<name>...)` is `(?P<name>...)`; POSIX classes (`[[:alpha:]]`) are spelled out; `\\x{h}` is `\\U`.
- Refused, RE2 only: `\\p`/`\\P` Unicode classes, `\\Q...\\E`, `\\C`, the U (ungreedy) flag,
  negated POSIX classes, `\\D \\W \\S \\b` inside a class. Python only: backreferences, lookaround, atomic groups, possessive
  repeats, conditionals, comments, flags a/L/u/x, `\\Z`. RE2 refuses repeat counts over 1000.
What matches is the same; the time is not: RE2 is linear in the text, Python's engine
backtracks, and nested repeats (`(a+)+$`) on a long non-matching string can take exponential time.
"""

from __future__ import annotations

import re

from luminal.frontends.onnx.errors import OnnxImportError


class RegexSyntaxError(OnnxImportError):
    """A RegexFullMatch pattern that RE2 rejects, or that uses an RE2 construct luminal's Python
    engine cannot reproduce; names the construct."""


_SHORT = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\n\\f\\r "}
_POSIX = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ", "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z", "word": "0-9A-Za-z_", "xdigit": "0-9A-Fa-f",
}
_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")  # RE2 reads "{,n}" as literal text (Python 3.11: {0,n})
MAX_REPEAT = 1000  # RE2's limit on a counted repetition


def translate(pattern: str) -> str:
    """The Python `re` pattern that fully matches exactly the strings the RE2 `pattern` does."""
    return _Translator(pattern).run()


def compile_re2(pattern: str, what: str) -> re.Pattern:
    try:
        return re.compile(translate(pattern))
    except re.error as exc:
        raise RegexSyntaxError(f"{what}: invalid regex pattern {pattern!r}: {exc}") from None


class _Translator:
    def __init__(self, pattern: str):
        self.p, self.i, self.out = pattern, 0, []
        # one entry per open group: [scoped flag groups opened in it (closed at its end), its flags,
        # the flag prefixes to reopen after a `|`]
        self.groups = [[0, set(), []]]

    def fail(self, what: str, engine: str):
        raise RegexSyntaxError(f"regex pattern {self.p!r}: {what} is {engine} syntax "
                               f"({'RE2 rejects it' if engine == 'Python-only' else 'not supported by luminal'})")

    def run(self) -> str:
        p = self.p
        while self.i < len(p):
            ch = p[self.i]
            if ch == "\\":
                self.out.append(self._escape(in_class=False))
            elif ch == "[":
                self.out.append(self._class())
            elif ch == "(":
                self._open()
            elif ch == ")":
                self._close()
            elif ch == "|":
                top = self.groups[-1]
                self.out.append(")" * top[0] + "|" + "".join(top[2]))
                self.i += 1
            elif ch == "$":
                self.out.append("$" if "m" in self.groups[-1][1] else "\\Z")
                self.i += 1
            elif ch in "*+?}":
                self.out.append(ch)
                self.i += 1
                if self.i < len(p) and p[self.i] == "+":
                    self.fail(f"the possessive repeat {ch}+", "Python-only")
            elif ch == "{":
                m = _REPEAT.match(p, self.i)
                if m and any(g and int(g) > MAX_REPEAT for g in m.groups()):
                    self.fail(f"a repeat count over {MAX_REPEAT} ({m.group(0)})", "Python-only")
                self.out.append(m.group(0) if m else "\\{")
                self.i = m.end() if m else self.i + 1
            else:
                self.out.append(ch)
                self.i += 1
        if len(self.groups) > 1:
            raise RegexSyntaxError(f"regex pattern {p!r}: missing )")
        self.out.append(")" * self.groups[0][0])
        return "".join(self.out)

    def _escape(self, in_class: bool) -> str:
        p = self.p
        if self.i + 1 >= len(p):
            raise RegexSyntaxError(f"regex pattern {p!r}: trailing backslash")
        c = p[self.i + 1]
        self.i += 2
        if c in _SHORT:
            return _SHORT[c] if in_class else f"[{_SHORT[c]}]"
        if c in "DWS":
            if in_class:
                self.fail(f"\\{c} inside a character class", "RE2")
            return f"[^{_SHORT[c.lower()]}]"
        if c in "bB":
            if in_class:  # Python reads it as a backspace there
                self.fail(f"\\{c} inside a character class", "RE2")
            return f"(?a:\\{c})"
        if c == "z":
            return "\\Z"
        if c.isdigit() and c != "0":
            self.fail(f"the backreference \\{c}", "Python-only")
        if c in "ZuUN":
            self.fail(f"\\{c}", "Python-only")
        if c in "pPQEC":
            self.fail(f"\\{c}" + (" (Unicode classes)" if c in "pP" else ""), "RE2")
        if c == "x" and self.i < len(p) and p[self.i] == "{":
            end = p.find("}", self.i)
            if end < 0:
                raise RegexSyntaxError(f"regex pattern {p!r}: unterminated \\x{{")
            code = int(p[self.i + 1:end], 16)
            self.i = end + 1
            return f"\\U{code:08x}"
        return "\\" + c

    def _class(self) -> str:
        p, out = self.p, ["["]
        self.i += 1
        if self.i < len(p) and p[self.i] == "^":
            out.append("^")
            self.i += 1
        first = True
        while self.i < len(p) and (p[self.i] != "]" or first):
            ch = p[self.i]
            if ch == "\\":
                out.append(self._escape(in_class=True))
            elif p.startswith("[:", self.i):
                end = p.find(":]", self.i + 2)
                name = p[self.i + 2:end] if end > 0 else ""
                if name.startswith("^"):
                    self.fail(f"the negated POSIX class [:{name}:]", "RE2")
                if name not in _POSIX:
                    raise RegexSyntaxError(f"regex pattern {p!r}: unknown POSIX class [:{name}:]")
                out.append(_POSIX[name])
                self.i = end + 2
            elif ch == "[" or (ch in "&~|-" and out[-1] == ch):  # Python reserves nested sets and doubled ops
                out.append("\\" + ch)
                self.i += 1
            else:
                out.append(ch)
                self.i += 1
            first = False
        if self.i >= len(p):
            raise RegexSyntaxError(f"regex pattern {p!r}: missing ]")
        self.i += 1
        return "".join(out) + "]"

    def _open(self) -> None:
        p = self.p
        parent = self.groups[-1][1]
        if not p.startswith("(?", self.i):
            self.out.append("(")
            self.groups.append([0, set(parent), []])
            self.i += 1
            return
        rest = p[self.i + 2:]
        for prefix, what in (("P=", "the named backreference (?P=...)"), ("=", "lookahead"), ("!", "lookahead"),
                             ("<=", "lookbehind"), ("<!", "lookbehind"), (">", "an atomic group"),
                             ("#", "a comment group"), ("(", "a conditional group")):
            if rest.startswith(prefix):
                self.fail(what, "Python-only")
        if rest.startswith("P<") or rest.startswith("<"):
            start = 2 + (2 if rest.startswith("P<") else 1)
            self.out.append("(?P<")
            self.i += start
            self.groups.append([0, set(parent), []])
            return
        m = re.match(r"([A-Za-z]*)(?:-([A-Za-z]*))?([:)])", rest)
        if not m:
            raise RegexSyntaxError(f"regex pattern {p!r}: malformed group at offset {self.i}")
        on, off, end = m.group(1), m.group(2) or "", m.group(3)
        for f in on + off:
            if f == "U":
                self.fail("the U (ungreedy) flag", "RE2")
            if f not in "ims":
                self.fail(f"the {f} flag", "Python-only")
        spec = on + (f"-{off}" if off else "")
        flags = (parent | set(on)) - set(off)
        self.i += 2 + m.end()
        if end == ":":
            self.out.append(f"(?{spec}:" if spec else "(?:")
            self.groups.append([0, flags, []])
            return
        if spec:  # flags for the rest of the enclosing group
            top = self.groups[-1]
            top[0] += 1
            top[1] = flags
            top[2].append(f"(?{spec}:")
            self.out.append(f"(?{spec}:")

    def _close(self) -> None:
        if len(self.groups) == 1:
            raise RegexSyntaxError(f"regex pattern {self.p!r}: unmatched )")
        pending = self.groups.pop()[0]
        self.out.append(")" * pending + ")")
        self.i += 1

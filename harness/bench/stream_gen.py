"""Hostile model answers for `tao bench fuzz-streams`: random text, well-formed calls, and mutations of them.

    gen = StreamGen(random.Random(seed))
    case = gen.answer()        # TextCase: the answer's chunks, and what a correct parser must find if known
    native = gen.native()      # NativeCase: a random `tool_calls` list (or something that is not one)

A case's `expected` is set only when nothing was mutated: then the parser must give exactly those calls
and that text. Every mutation is labelled, so a failure says which kind of damage caused it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from harness.protocol import CLOSE, OPEN

TOOLS = ("read_file", "grep", "list_files", "outline", "edit_file", "write_file", "run_tests", "bash", "finish")
_WORDS = ("I", "will", "read", "the", "file", "then", "run", "tests.", "Let", "me", "check", "calc/ops.py",
          "if a < b and c > d:", "x<y", "<b>", "<tool", "<tool_", "</tool_call", "<tool_call", "tool_call>",
          "</tool_call>", "{", "}", "\"", "\\", "\n", "\t", "é", "中文", "😀", "\u202e", "\u200b", "\x00", "\x1b[31m",
          "\ud800", "\r\n", "```python", "def f():", "    return 1", "```")
_STRING_PIECES = ("a", "calc/ops.py", " ", "\"", "\\", "\n", "\t", "é", "中", "😀", "<tool_call>", "{}", "[1]",
                  "\u202e", "\u200b", "\x7f", "'", "%s", "$HOME", "../", "*.py", "\\u0041")
_SHELL_PIECES = ("python", "pytest", "-q", "tests/test_ops.py", "calc/ops.py", "cat", "sed", "-n", "'1,20p'", "grep",
                 "-rn", "\"def add\"", "ls", "-la", "&&", "||", "|", ";", "&", "\n", ">", ">>", "2>&1", "<<", "'EOF'",
                 "EOF", "<<-", "$(", ")", "`", "\"", "'", "\\", "#", "cd", "/work/repo", "$HOME", "*.py", "{a,b}", "(",
                 "nl", "-ba", "head", "-n", "5", "rm", "-rf", "build", "mkdir", "-p", "echo", "x=1", "python3", "-c",
                 "\"print(1)\"", "\t", "  ", "\x00", "é", "-k", "test_add", "::", "--", "<", "|&", ";;", "\\\n")
_NAME_NOISE = ("\x00", "\x1b", "\n", "\t", "\x7f", "\u202e", "\u200b", "\ud800", "\udfff", " ", "\"", "<", "\x9b")
_DEPTHS = (20, 63, 64, 65, 100, 500, 999, 1000, 2000, 5000, 20000, 100000)
MUTATIONS = ("truncate", "no_close", "no_open", "double_open", "double_close", "partial_tags", "bad_json",
             "deep", "deep_string_args", "huge_number", "nan", "surrogate", "control", "name_type", "args_type",
             "top_type", "close_in_string", "long_name", "bom", "name_noise", "garbage")


@dataclass
class TextCase:
    """One streamed answer, cut into chunks; `expected` calls and text when it was left well-formed."""

    chunks: list[str]
    labels: list[str] = field(default_factory=list)
    expected_calls: list[tuple[str, dict[str, Any]]] | None = None
    expected_text: str | None = None

    @property
    def text(self) -> str:
        """The whole answer, as the chunks put together."""
        return "".join(self.chunks)


@dataclass
class NativeCase:
    """One native `tool_calls` value; `expected` (call id, name, arguments) for the items left well-formed."""

    tool_calls: Any
    labels: list[str] = field(default_factory=list)
    expected: dict[int, tuple[str, str, dict[str, Any]]] = field(default_factory=dict)


class StreamGen:
    """Draws cases from one random generator, so that a seed and a case number reproduce a case."""

    def __init__(self, rng: random.Random) -> None:
        """Draw from `rng` (seeded with the seed and the case number)."""
        self.rng = rng

    # -- values ----------------------------------------------------------------------------------------

    def string(self, size: int = 12) -> str:
        """A JSON-safe string (no lone surrogates, no closing tag): what a real argument may hold."""
        return "".join(self.rng.choice(_STRING_PIECES) for _ in range(self.rng.randint(0, size)))

    def value(self, depth: int = 0) -> Any:
        """A random JSON value, nested at most four levels."""
        roll = self.rng.random()
        if depth >= 4 or roll < 0.55:
            return self.rng.choice([
                lambda: self.string(), lambda: self.rng.randint(-10**6, 10**6), lambda: self.rng.random() * 1e6,
                lambda: self.rng.choice([True, False, None]), lambda: self.rng.randint(-2**70, 2**70)])()
        if roll < 0.8:
            return [self.value(depth + 1) for _ in range(self.rng.randint(0, 3))]
        return {self.string(6): self.value(depth + 1) for _ in range(self.rng.randint(0, 3))}

    def arguments(self) -> dict[str, Any]:
        """A well-formed arguments object: the tools' own keys mostly, with random values."""
        keys = ("path", "pattern", "command", "start_line", "end_line", "depth", "content", "old", "new", "glob")
        args = {self.rng.choice(keys) if self.rng.random() < 0.7 else self.string(6): self.value()
                for _ in range(self.rng.randint(0, 4))}
        if self.rng.random() < 0.3:
            args["command"] = self.command()
        return args

    def command(self) -> str:
        """A shell command as agents write them, and as they get them wrong (for the shell reader)."""
        return " ".join(self.rng.choice(_SHELL_PIECES) for _ in range(self.rng.randint(1, 14)))

    def name(self) -> str:
        """A tool name: one of Tao's mostly, else a printable made-up one."""
        if self.rng.random() < 0.8:
            return self.rng.choice(TOOLS)
        name = "".join(self.rng.choice("abcdefgh_-.:éZ9 ") for _ in range(self.rng.randint(1, 20)))
        return name if name.isprintable() else "x"

    # -- text answers ----------------------------------------------------------------------------------

    def prose(self) -> str:
        """Reasoning text; never holds an opening tag (it would start a call)."""
        text = " ".join(self.rng.choice(_WORDS) for _ in range(self.rng.randint(0, 12)))
        if self.rng.random() < 0.03:  # a long run of path characters (a minified line, a data dump)
            text += self.rng.choice(("a/", "/a", "a.b/", "x-")) * self.rng.choice((150, 2000, 20000)) + " x.py:3:"
        return text.replace(OPEN, "<tool call>")

    def body(self, name: str, args: dict[str, Any]) -> str:
        """A well-formed call's JSON, in one of the spellings models use."""
        style = self.rng.randrange(6)
        if style == 0:
            return json.dumps({"name": name, "arguments": args})
        if style == 1:
            return json.dumps({"name": name, "arguments": args}, ensure_ascii=False, separators=(",", ":"))
        if style == 2:
            return json.dumps({"name": name, "arguments": args}, indent=2)
        if style == 3:
            return json.dumps({"arguments": args, "name": name})  # name last: reported only when complete
        if style == 4:
            return json.dumps({"name": name, "arguments": json.dumps(args)})  # OpenAI style: a JSON string
        return f'\n {json.dumps({"name": name, "arguments": args})} \n' if args else json.dumps({"name": name})

    def answer(self) -> TextCase:
        """Text and calls in turn; about half the calls damaged by one to three mutations."""
        pieces: list[str] = []
        calls: list[tuple[str, dict[str, Any]]] = []
        labels: list[str] = []
        texts: list[str] = []
        for _ in range(self.rng.choice((0, 1, 1, 1, 2, 3))):
            text = self.prose()
            texts.append(text)
            name, args = self.name(), self.arguments()
            call = OPEN + self.body(name, args) + CLOSE
            if self.rng.random() < 0.5:
                for _ in range(self.rng.randint(1, 3)):
                    label = self.rng.choice(MUTATIONS)
                    call = getattr(self, f"_m_{label}")(call)
                    labels.append(label)
            pieces += [text, call]
            calls.append((name, args))
        tail = self.prose()
        pieces.append(tail)
        whole = "".join(pieces)
        case = TextCase(self.chunks(whole), labels)
        if not labels:
            case.expected_calls, case.expected_text = calls, "".join(texts) + tail
        return case

    def chunks(self, text: str) -> list[str]:
        """Cut a stream as an engine might: single characters, small or random pieces, cuts inside tags."""
        if not text:
            return [""]
        least = max(1, len(text) // 4000)  # at most a few thousand chunks, so that huge cases stay quick
        mode = self.rng.randrange(5)
        if mode == 0:
            return [text]
        if mode in (1, 2):
            size = max(least, self.rng.choice((1, 1, 2, 3, 5, 8, 13, 64)))
            return [text[i:i + size] for i in range(0, len(text), size)]
        cuts: set[int] = set()
        if mode == 3:  # cut inside every tag, so partial tags end chunks
            start = text.find("<")
            while start >= 0 and len(cuts) < 4000:
                cuts.add(start + self.rng.randint(1, len(CLOSE)))
                start = text.find("<", start + 1)
        position = 0
        while position < len(text):
            position += max(least, self.rng.randint(1, self.rng.choice((4, 16, 200))))
            cuts.add(position)
        points = sorted(c for c in cuts if 0 < c < len(text))
        return [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]

    # -- mutations of one call's text (tags included) ---------------------------------------------------

    def _spot(self, text: str) -> int:
        """A random position in `text`."""
        return self.rng.randint(0, len(text))

    def _m_truncate(self, call: str) -> str:
        """The call cut short anywhere (the stream ended)."""
        return call[:self._spot(call)]

    def _m_no_close(self, call: str) -> str:
        """The closing tag missing."""
        return call.replace(CLOSE, "", 1)

    def _m_no_open(self, call: str) -> str:
        """The opening tag missing: the call reads as text."""
        return call.replace(OPEN, "", 1)

    def _m_double_open(self, call: str) -> str:
        """Two opening tags."""
        return OPEN + call

    def _m_double_close(self, call: str) -> str:
        """Two closing tags."""
        return call + CLOSE

    def _m_partial_tags(self, call: str) -> str:
        """A piece of a tag somewhere in the call."""
        tag = self.rng.choice((OPEN, CLOSE))[: self.rng.randint(1, len(CLOSE) - 1)]
        at = self._spot(call)
        return call[:at] + tag + call[at:]

    def _m_bad_json(self, call: str) -> str:
        """One character replaced by JSON punctuation, or deleted."""
        at = self._spot(call)
        return call[:at] + self.rng.choice(("", "{", "}", "[", "]", '"', ",", ":", "\\", "'", "nul")) + call[at + 1:]

    def _deep(self) -> str:
        """Raw JSON nested many levels (lists, objects or both), closed or left open."""
        depth = self.rng.choice(_DEPTHS)
        kind = self.rng.randrange(3)
        opened = "[" * depth if kind == 0 else '{"a":' * depth if kind == 1 else '[{"a":' * (depth // 2)
        closed = "]" * depth if kind == 0 else "}" * depth if kind == 1 else "}]" * (depth // 2)
        return opened + ("1" if kind else "") + (closed if self.rng.random() < 0.8 else closed[: depth // 2])

    def _with_arguments(self, call: str, value: str) -> str:
        """The call with its arguments replaced by `value` (raw JSON text)."""
        return f'{OPEN}{{"name": "{self.rng.choice(TOOLS)}", "arguments": {value}}}{CLOSE}' if OPEN in call else call

    def _m_deep(self, call: str) -> str:
        """An argument nested many levels."""
        return self._with_arguments(call, '{"path": ' + self._deep() + "}")

    def _m_deep_string_args(self, call: str) -> str:
        """Deep nesting inside arguments given as a JSON string."""
        return self._with_arguments(call, json.dumps(self._deep()))

    def _m_huge_number(self, call: str) -> str:
        """Numbers past what Python converts or a float holds."""
        number = self.rng.choice(("1" + "0" * self.rng.choice((4299, 4300, 5000, 50000)), "1e999", "-1e999",
                                  "1e-999", "0." + "0" * 5000 + "1", "-" + "9" * 5000, "1e308", "12345678901234567890"))
        return self._with_arguments(call, '{"start_line": ' + number + ', "path": "a.py"}')

    def _m_nan(self, call: str) -> str:
        """NaN or Infinity, which JSON does not allow."""
        return self._with_arguments(call, '{"start_line": ' + self.rng.choice(("NaN", "Infinity", "-Infinity")) + "}")

    def _m_surrogate(self, call: str) -> str:
        """Lone surrogates (escaped or raw) in the name, a value or a key; sometimes a valid pair."""
        bad = self.rng.choice(("\\ud800", "\\udfff", "\\ud83d\\ude00", "\ud800", "\\udc00\\ud800"))
        where = self.rng.randrange(3)
        if where == 0:
            return f'{OPEN}{{"name": "read{bad}", "arguments": {{}}}}{CLOSE}'
        if where == 1:
            return self._with_arguments(call, '{"path": "a' + bad + '.py"}')
        return self._with_arguments(call, '{"k' + bad + '": 1}')

    def _m_control(self, call: str) -> str:
        """Control characters, raw (invalid JSON) or escaped, in a path and a pattern."""
        char = self.rng.choice(("\x00", "\x1b", "\x07", "\x7f", "\\u0000", "\\u001b", "\\n", "\x0b"))
        return self._with_arguments(call, '{"path": "calc/' + char + 'ops.py", "pattern": "' + char + '"}')

    def _m_name_type(self, call: str) -> str:
        """A name that is no string, empty, blank, or missing."""
        name = self.rng.choice(("5", "null", "[]", "{}", "true", '""', '"   "', "1e999", '["read_file"]'))
        body = '{"arguments": {}}' if self.rng.random() < 0.2 else '{"name": ' + name + ', "arguments": {}}'
        return OPEN + body + CLOSE

    def _m_args_type(self, call: str) -> str:
        """Arguments of every JSON type but an object, and strings that hold JSON or not."""
        value = self.rng.choice(("[]", "[1, 2]", "null", "5", "true", '"x"', '"[1]"', '"{bad"', '""', '"  "',
                                 '"null"', '"{\\"path\\": \\"a\\"}"', "{}"))
        return self._with_arguments(call, value)

    def _m_top_type(self, call: str) -> str:
        """A call body that is no object."""
        return OPEN + self.rng.choice(("[]", '"read_file"', "5", "", "  ", "null", "{}", "{", "}", "\ufeff{}")) + CLOSE

    def _m_close_in_string(self, call: str) -> str:
        """A closing tag inside a string value (it ends the call there)."""
        return self._with_arguments(call, '{"content": "a</tool_call>b", "path": "x.py"}')

    def _m_long_name(self, call: str) -> str:
        """A name up to 600,000 characters long."""
        name = self.rng.choice(("a", "read_file", "\\u001b")) * self.rng.choice((100, 1000, 100000))
        return f'{OPEN}{{"name": "{name}", "arguments": {{}}}}{CLOSE}'

    def _m_bom(self, call: str) -> str:
        """A byte-order mark before the JSON."""
        return call.replace(OPEN, OPEN + "\ufeff", 1)

    def _m_name_noise(self, call: str) -> str:
        """Control, format and surrogate characters inside a tool name, escaped or raw."""
        noise = "".join(self.rng.choice(_NAME_NOISE) for _ in range(self.rng.randint(1, 4)))
        name = self.rng.choice(TOOLS)
        at = self.rng.randint(0, len(name))
        spelled = json.dumps(name[:at] + noise + name[at:]) if self.rng.random() < 0.5 else \
            '"' + name[:at] + noise + name[at:] + '"'  # raw, unescaped: invalid JSON
        return f'{OPEN}{{"name": {spelled}, "arguments": {{"path": "a.py"}}}}{CLOSE}'

    def _m_garbage(self, call: str) -> str:
        """Random characters inserted anywhere."""
        noise = "".join(chr(self.rng.randint(0, 0x2FFF)) for _ in range(self.rng.randint(1, 40)))
        at = self._spot(call)
        return call[:at] + noise + call[at:]

    # -- native tool_calls -----------------------------------------------------------------------------

    def native(self) -> NativeCase:
        """A random `tool_calls` list: well-formed items, damaged ones, and now and then not a list at all."""
        if self.rng.random() < 0.03:
            return NativeCase(self.rng.choice((None, {}, "tool_calls", 5, {"function": {}})), ["not_a_list"])
        case = NativeCase([])
        for index in range(self.rng.randint(0, 4)):
            name, args = self.name(), self.arguments()
            call_id = self.rng.choice((f"c{index}", "", None, f"call_{self.rng.randrange(10**6)}"))
            item: Any = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            if self.rng.random() < 0.15:
                item["function"]["arguments"] = args  # already an object (some servers)
            if self.rng.random() < 0.5:
                label = self.rng.randrange(8)
                item = self._damage_native(item, label)
                case.labels.append(f"native_{label}")
            else:
                case.expected[index] = (call_id or f"call_{index}", name, args)
            case.tool_calls.append(item)
        return case

    def _damage_native(self, item: dict[str, Any], label: int) -> Any:
        """One kind of damage (by `label`) to a native call item."""
        function = item["function"]
        if label == 0:
            return self.rng.choice(("read_file", 5, None, [], [item], True))
        if label == 1:
            item["function"] = self.rng.choice((None, "read_file", [], 7, {}))
        elif label == 2:
            function["name"] = self.rng.choice((None, 5, [], {}, "", "read\x1bfile", "\ud800", "a" * 100000))
        elif label == 3:
            function["arguments"] = self.rng.choice(("{bad", "[]", "null", "5", '"x"', None, [], 5, True, "NaN",
                                                     '{"a": NaN}', '{"a": 1e999}', '{"a": "\\ud800"}'))
        elif label == 4:
            function["arguments"] = json.dumps({"path": self._deep()}) if self.rng.random() < 0.5 else self._deep()
        elif label == 5:
            function["arguments"] = _nested(self.rng.choice(_DEPTHS))  # a deep object, already decoded
        elif label == 6:
            item["id"] = self.rng.choice((5, [], {"a": 1}, _nested(5000), "\x1b", "\ud800"))
        else:
            item["function"]["arguments"] = "\x00" + json.dumps({"path": "a\x00.py"})
        return item


def _nested(depth: int) -> dict[str, Any]:
    """A dict nested `depth` levels, built without recursion."""
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value

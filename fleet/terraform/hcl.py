"""Reading Terraform configurations offline: parsed blocks, a small expression evaluator, type constraints.

Nothing here runs Terraform. python-hcl2 parses the files; expressions come back as text, and
:func:`evaluate` works out the values an expression can take from literals, templates, conditionals (both
branches), ``tostring``/``coalesce``/``jsonencode`` and references that a scope resolves (variables,
locals, ``each``, dynamic iterators; see fleet.terraform.check). Anything else (other functions, other
resources' attributes, comprehensions) is :data:`UNKNOWN`. Type constraints
(``map(object({... optional(T, d) ...}))``) are parsed so that object defaults can be filled in and
exported values checked against them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
from hcl2.utils import SerializationOptions


class HclError(ValueError):
    """A file or an expression that cannot be parsed."""


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
"""The value of an expression this module cannot evaluate offline."""

_OPTIONS = SerializationOptions(with_comments=False, explicit_blocks=True, preserve_heredocs=False)
META_KEYS = frozenset({"__is_block__", "__start_line__", "__end_line__"})


# ---------------------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Block:
    """One top-level block: ``resource "type" "name"``, ``variable "name"``, ``module "name"``, ..."""

    kind: str
    labels: tuple[str, ...]
    body: dict[str, Any]
    file: str
    line: int | None = None
    text: str = ""

    def line_of(self, name: str) -> int | None:
        """Line of the first ``name =`` or ``name {`` inside this block (python-hcl2 keeps no positions)."""
        if self.line is None:
            return None
        lines = self.text.splitlines()
        pattern = re.compile(rf'^\s*(?:dynamic\s+)?"?{re.escape(name)}"?\s*[={{]')
        for number in range(self.line, len(lines)):
            if pattern.match(lines[number]):
                return number + 1
        return self.line


@dataclass
class TfConfig:
    """Every block of the ``*.tf`` files of one directory (one Terraform module)."""

    path: Path
    blocks: list[Block] = field(default_factory=list)

    def of(self, kind: str) -> list[Block]:
        return [b for b in self.blocks if b.kind == kind]

    @property
    def variables(self) -> dict[str, Block]:
        return {b.labels[0]: b for b in self.of("variable")}

    @property
    def locals(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for b in self.of("locals"):
            merged.update({k: v for k, v in b.body.items() if k not in META_KEYS})
        return merged

    def resources(self) -> list[Block]:
        return self.of("resource")


def unquote_label(label: str) -> str:
    return label[1:-1] if len(label) >= 2 and label[0] == label[-1] == '"' else label


def _blocks_of(kind: str, entry: Any, depth: int, labels: tuple[str, ...], file: str) -> Iterable[Block]:
    """python-hcl2 nests labelled blocks as {label: {label: body}}; unwrap ``depth`` labels."""
    if depth == 0:
        yield Block(kind, labels, entry, file)
        return
    for label, inner in entry.items():
        if label in META_KEYS:
            continue
        yield from _blocks_of(kind, inner, depth - 1, (*labels, unquote_label(label)), file)


_LABELS = {"resource": 2, "data": 2, "variable": 1, "output": 1, "module": 1, "provider": 1}


def parse_text(text: str, file: str = "<text>") -> list[Block]:
    """Parse one file's text into its top-level blocks."""
    try:
        doc = hcl2.loads(text, serialization_options=_OPTIONS)
    except Exception as exc:  # python-hcl2 raises lark's exceptions, which share no base we can name
        raise HclError(f"{file}: cannot parse HCL: {str(exc).splitlines()[0]}") from exc
    blocks: list[Block] = []
    for kind, entries in doc.items():
        if kind in META_KEYS:
            continue
        for entry in entries if isinstance(entries, list) else [entries]:
            blocks.extend(_blocks_of(kind, entry, _LABELS.get(kind, 0), (), file))
    lines = text.splitlines()
    for block in blocks:
        labels = "".join(rf'\s+"{re.escape(label)}"' for label in block.labels)
        header = re.compile(rf"^{block.kind}{labels}\s*{{")
        block.line = next((i + 1 for i, line in enumerate(lines) if header.match(line)), None)
        block.text = text
    return blocks


def load_dir(path: str | Path) -> TfConfig:
    """Parse every ``*.tf`` file of one directory (not its subdirectories: those are other modules)."""
    root = Path(path)
    config = TfConfig(root)
    for tf in sorted(root.glob("*.tf")):
        config.blocks.extend(parse_text(tf.read_text(encoding="utf-8"), str(tf)))
    return config


# ---------------------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------------------


def is_expression(raw: Any) -> bool:
    return isinstance(raw, str) and raw.startswith("${") and raw.endswith("}")


def literal(raw: Any) -> Any:
    """The Python value of a parsed HCL value if it is constant (quotes removed), else UNKNOWN."""
    if isinstance(raw, bool | int | float) or raw is None:
        return raw
    if isinstance(raw, str):
        if is_expression(raw):
            try:
                return _Parser(raw[2:-1]).parse_constant()
            except HclError:
                return UNKNOWN
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            if "${" in raw:
                return UNKNOWN
            return _unescape(raw[1:-1])
        return raw
    if isinstance(raw, list):
        items = [literal(v) for v in raw]
        return UNKNOWN if any(v is UNKNOWN for v in items) else items
    if isinstance(raw, dict):
        obj = {unquote_label(k): literal(v) for k, v in raw.items() if k not in META_KEYS}
        return UNKNOWN if any(v is UNKNOWN for v in obj.values()) else obj
    return UNKNOWN


def _unescape(text: str) -> str:
    return re.sub(r'\\(["\\nt])', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


# ---------------------------------------------------------------------------------------------------------
# Expressions: a tokenizer and a parser for the subset we evaluate
# ---------------------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>"(?:[^"\\]|\\.)*")
      | (?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
      | (?P<op>==|!=|>=|<=|&&|\|\||=>|[\[\](){}.,?:=<>!+\-*/%])
      | (?P<ident>[A-Za-z_][A-Za-z0-9_-]*)
    )""",
    re.VERBOSE,
)


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise HclError(f"cannot read expression at {text[pos : pos + 20]!r}")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return tokens


@dataclass(frozen=True)
class Ref:
    """A traversal such as ``var.alarms`` or ``each.value.metric``."""

    parts: tuple[str, ...]


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Cond:
    then: Any
    otherwise: Any


@dataclass(frozen=True)
class ListExpr:
    items: tuple[Any, ...]


@dataclass(frozen=True)
class ObjectExpr:
    items: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Const:
    value: Any


@dataclass(frozen=True)
class Template:
    """A quoted string with ``${...}`` interpolations: literal text and expressions, in order."""

    parts: tuple[Any, ...]


def parse_template(body: str) -> Any:
    """Parse the inside of a quoted HCL string; ``%{`` directives are not supported (HclError)."""
    if "%{" in body:
        raise HclError("template directives are not evaluated")
    parts: list[Any] = []
    pos = 0
    while True:
        start = body.find("${", pos)
        if start < 0:
            parts.append(Const(_unescape(body[pos:])))
            break
        parts.append(Const(_unescape(body[pos:start])))
        depth, i, quoted = 1, start + 2, False
        while i < len(body) and depth:
            c = body[i]
            if c == "\\" and quoted:
                i += 1
            elif c == '"':
                quoted = not quoted
            elif not quoted and c == "{":
                depth += 1
            elif not quoted and c == "}":
                depth -= 1
            i += 1
        if depth:
            raise HclError("unclosed interpolation")
        parts.append(parse_expression(body[start + 2 : i - 1]))
        pos = i
    return Template(tuple(p for p in parts if not (isinstance(p, Const) and p.value == "")))


class _Opaque:
    """An operator expression: its value is never needed for argument checks."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.pos = 0

    def peek(self, value: str | None = None) -> bool:
        if self.pos >= len(self.tokens):
            return False
        return value is None or self.tokens[self.pos][1] == value

    def take(self, value: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens) or (value is not None and self.tokens[self.pos][1] != value):
            raise HclError(f"expected {value!r}")
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def parse(self) -> Any:
        node = self.expr()
        if self.pos != len(self.tokens):
            raise HclError("trailing tokens")
        return node

    def parse_constant(self) -> Any:
        value = evaluate(self.parse(), {})
        if value is UNKNOWN or (isinstance(value, list) and len(value) != 1):
            raise HclError("not a constant")
        return value[0]

    def expr(self) -> Any:
        cond = self.binary()
        if self.peek("?"):
            self.take("?")
            then = self.expr()
            self.take(":")
            return Cond(then, self.expr())
        return cond

    def binary(self) -> Any:
        left = self.unary()
        while self.peek() and self.tokens[self.pos][1] in {
            "==",
            "!=",
            ">=",
            "<=",
            ">",
            "<",
            "&&",
            "||",
            "+",
            "-",
            "*",
            "/",
            "%",
        }:
            self.take()
            self.unary()
            left = _Opaque()
        return left

    def unary(self) -> Any:
        if self.peek("!") or self.peek("-"):
            self.take()
            self.unary()
            return _Opaque()
        return self.postfix()

    def postfix(self) -> Any:
        node = self.primary()
        while True:
            if self.peek(".") and isinstance(node, Ref):
                self.take(".")
                kind, name = self.take()
                node = Ref((*node.parts, name if kind != "str" else _unescape(name[1:-1])))
            elif self.peek("[") and isinstance(node, Ref):
                self.take("[")
                key = self.expr()
                self.take("]")
                node = Ref((*node.parts, key.value)) if isinstance(key, Const) else _Opaque()
            else:
                return node

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "str":
            return parse_template(text[1:-1]) if "${" in text else Const(_unescape(text[1:-1]))
        if kind == "num":
            return Const(float(text) if any(c in text for c in ".eE") else int(text))
        if kind == "ident":
            return self._identifier(text)
        if text == "(":
            node = self.expr()
            self.take(")")
            return node
        if text in ("[", "{") and self.peek("for"):
            self._skip_to_close(1)
            return _Opaque()
        if text == "[":
            return ListExpr(tuple(self._items("]")))
        if text == "{":
            return self._object()
        raise HclError(f"unexpected {text!r}")

    def _identifier(self, text: str) -> Any:
        """A keyword literal, a `for` (skipped), a function call or a reference."""
        if text in ("true", "false"):
            return Const(text == "true")
        if text == "null":
            return Const(None)
        if text == "for":
            self._skip_to_close()
            return _Opaque()
        if self.peek("("):
            self.take("(")
            return Call(text, tuple(self._items(")")))
        return Ref((text,))

    def _items(self, close: str) -> list[Any]:
        """Comma-separated expressions up to and including ``close``."""
        items: list[Any] = []
        while not self.peek(close):
            items.append(self.expr())
            if not self.peek(close):
                self.take(",")
        self.take(close)
        return items

    def _object(self) -> ObjectExpr:
        pairs: list[tuple[str, Any]] = []
        while not self.peek("}"):
            kkind, key = self.take()
            name = _unescape(key[1:-1]) if kkind == "str" else key
            if not (self.peek("=") or self.peek(":")):
                raise HclError("expected '=' in object")
            self.take()
            pairs.append((name, self.expr()))
            if self.peek(","):
                self.take(",")
        self.take("}")
        return ObjectExpr(tuple(pairs))

    def _skip_to_close(self, depth: int = 0) -> None:
        """Skip a `for` expression up to the bracket that closes it (we never evaluate comprehensions)."""
        while self.pos < len(self.tokens):
            text = self.tokens[self.pos][1]
            if text in "([{":
                depth += 1
            elif text in ")]}":
                depth -= 1
                if depth < 0:
                    return
                if depth == 0:
                    self.pos += 1
                    return
            self.pos += 1


def parse_expression(text: str) -> Any:
    """Parse the inside of ``${...}`` into the small AST above; raises HclError."""
    return _Parser(text).parse()


def evaluate(node: Any, scope: Mapping[str, Any]) -> Any:
    """The possible values of an expression: a list of candidates, or UNKNOWN.

    ``scope`` maps a root name (``var``, ``local``, ``each``, a dynamic iterator) to a function taking the
    remaining traversal parts and returning candidates (or UNKNOWN). A conditional yields the values of both
    branches: checks must hold whichever branch Terraform picks.
    """
    if isinstance(node, Const):
        return [node.value]
    if isinstance(node, Ref):
        resolver = scope.get(node.parts[0])
        return UNKNOWN if resolver is None else resolver(node.parts[1:])
    if isinstance(node, Template):
        return _evaluate_template(node, scope)
    if isinstance(node, Cond):
        a, b = evaluate(node.then, scope), evaluate(node.otherwise, scope)
        return UNKNOWN if a is UNKNOWN or b is UNKNOWN else a + b
    if isinstance(node, ListExpr):
        parts = [evaluate(i, scope) for i in node.items]
        if any(p is UNKNOWN for p in parts):
            return UNKNOWN
        # One list holding every candidate of every item: a superset of each list Terraform could build,
        # which is what element checks need.
        return [[v for p in parts for v in p]]
    if isinstance(node, ObjectExpr):
        return _evaluate_object(node, scope)
    if isinstance(node, Call):
        return _evaluate_call(node, scope)
    return UNKNOWN


def _evaluate_template(node: Template, scope: Mapping[str, Any]) -> Any:
    texts = [""]
    for part in node.parts:
        values = evaluate(part, scope)
        if values is UNKNOWN or any(isinstance(v, dict | list) or v is None for v in values):
            return UNKNOWN
        texts = [t + str(_tostring(v)) for t in texts for v in values]
        if len(texts) > 10_000:  # a combinatorial template: give up rather than enumerate it
            return UNKNOWN
    return texts


def _evaluate_object(node: ObjectExpr, scope: Mapping[str, Any]) -> Any:
    obj: dict[str, Any] = {}
    for key, value in node.items:
        v = evaluate(value, scope)
        if v is UNKNOWN or len(v) != 1:
            return UNKNOWN
        obj[key] = v[0]
    return [obj]


def _evaluate_call(node: Call, scope: Mapping[str, Any]) -> Any:
    """The few functions the module uses on checked values; any other call is UNKNOWN."""
    args = [evaluate(a, scope) for a in node.args]
    if node.name == "tostring" and len(args) == 1 and args[0] is not UNKNOWN:
        return [_tostring(v) for v in args[0]]
    if node.name == "tonumber" and len(args) == 1 and args[0] is not UNKNOWN:
        return args[0]
    if node.name == "coalesce" and args and all(a is not UNKNOWN for a in args):
        return _coalesce(args)
    if node.name == "jsonencode" and len(args) == 1 and args[0] is not UNKNOWN:
        return [json.dumps(v, separators=(",", ":")) for v in args[0]]
    if node.name == "replace" and len(args) == 3 and all(a is not UNKNOWN for a in args):
        return _replace(args)
    return UNKNOWN


def _replace(args: list[list[Any]]) -> Any:
    """replace(string, substring, replacement); a substring in slashes is a regular expression (RE2, read
    here as Python's re, which agrees on the simple classes the module uses; a replacement naming a capture
    group, `$1`, is not worked out)."""
    out: list[Any] = []
    for text in args[0]:
        for sub in args[1]:
            for rep in args[2]:
                if not all(isinstance(v, str) for v in (text, sub, rep)) or "$" in rep:
                    return UNKNOWN
                if len(sub) > 1 and sub.startswith("/") and sub.endswith("/"):
                    try:
                        out.append(re.sub(sub[1:-1], rep.replace("\\", "\\\\"), text))
                    except re.error:
                        return UNKNOWN
                else:
                    out.append(text.replace(sub, rep))
    return out


def _tostring(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if value is None else str(value)


def _coalesce(args: list[list[Any]]) -> list[Any]:
    """coalesce picks the first non-null argument; with candidate sets, every reachable pick."""
    out: list[Any] = []
    for candidates in args:
        out.extend(v for v in candidates if v is not None and v != "")
        if all(v is not None and v != "" for v in candidates):
            break
    return out


def traverse(value: Any, parts: Iterable[Any]) -> Any:
    """Follow attribute/index parts into a Python value; UNKNOWN when a part is missing."""
    for part in parts:
        in_map = isinstance(value, Mapping) and part in value
        in_list = isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value)
        if not (in_map or in_list):
            return UNKNOWN
        value = value[part]
    return value


# ---------------------------------------------------------------------------------------------------------
# Type constraints
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TfType:
    """A Terraform type constraint. kind: string|number|bool|any|list|set|map|object|tuple."""

    kind: str
    elem: TfType | None = None
    attrs: tuple[tuple[str, TfType, bool, Any], ...] = ()  # (name, type, optional, default)
    items: tuple[TfType, ...] = ()

    def attr_map(self) -> dict[str, tuple[TfType, bool, Any]]:
        return {n: (t, o, d) for n, t, o, d in self.attrs}


def parse_type(raw: Any) -> TfType:
    """Parse a variable's ``type`` as python-hcl2 returns it (``${map(object({...}))}``)."""
    text = raw[2:-1] if is_expression(raw) else str(raw)
    parser = _Parser(text)
    result = _type_from(parser)
    if parser.pos != len(parser.tokens):
        raise HclError(f"cannot read type {text!r}")
    return result


def _type_from(p: _Parser) -> TfType:
    _, name = p.take()
    if name in ("string", "number", "bool", "any"):
        return TfType(name)
    if name in ("list", "set", "map"):
        p.take("(")
        elem = _type_from(p)
        p.take(")")
        return TfType(name, elem=elem)
    if name == "tuple":
        p.take("(")
        p.take("[")
        items: list[TfType] = []
        while not p.peek("]"):
            items.append(_type_from(p))
            if not p.peek("]"):
                p.take(",")
        p.take("]")
        p.take(")")
        return TfType("tuple", items=tuple(items))
    if name == "object":
        p.take("(")
        p.take("{")
        attrs: list[tuple[str, TfType, bool, Any]] = []
        while not p.peek("}"):
            _, attr = p.take()
            p.take("=")
            if p.peek("optional"):
                p.take("optional")
                p.take("(")
                attr_type = _type_from(p)
                default: Any = None
                if p.peek(","):
                    p.take(",")
                    value = evaluate(p.expr(), {})
                    if value is UNKNOWN or len(value) != 1:
                        raise HclError(f"optional default of {attr!r} is not a constant")
                    default = value[0]
                p.take(")")
                attrs.append((attr, attr_type, True, default))
            else:
                attrs.append((attr, _type_from(p), False, None))
            if p.peek(","):
                p.take(",")
        p.take("}")
        p.take(")")
        return TfType("object", attrs=tuple(attrs))
    raise HclError(f"unknown type {name!r}")


def apply_defaults(tf_type: TfType, value: Any) -> Any:
    """Fill the optional attributes' defaults in, as Terraform does when it converts a value to the type."""
    if value is None or value is UNKNOWN:
        return value
    if tf_type.kind == "object" and isinstance(value, Mapping):
        out = dict(value)
        for name, attr_type, optional, default in tf_type.attrs:
            if name in out and out[name] is not None:
                out[name] = apply_defaults(attr_type, out[name])
            elif optional:
                out[name] = apply_defaults(attr_type, default)
        return out
    if tf_type.kind == "map" and isinstance(value, Mapping) and tf_type.elem:
        return {k: apply_defaults(tf_type.elem, v) for k, v in value.items()}
    if tf_type.kind in ("list", "set") and isinstance(value, list) and tf_type.elem:
        return [apply_defaults(tf_type.elem, v) for v in value]
    return value


def type_errors(tf_type: TfType, value: Any, path: str = "") -> list[str]:
    """Why ``value`` (as decoded from a tfvars JSON file) does not convert to ``tf_type``; empty if it does.

    Follows Terraform's conversions: numbers and bools convert to string, numeric strings to number, "true"/
    "false" to bool; objects need every non-optional attribute and no unknown ones.
    """
    where = path or "value"
    if value is None:
        return []
    kind = tf_type.kind
    if kind == "any":
        return []
    if kind in ("string", "number", "bool"):
        return _primitive_type_errors(kind, value, where)
    if kind in ("list", "set", "tuple", "map"):
        return _collection_type_errors(tf_type, value, where)
    if kind == "object":
        return _object_type_errors(tf_type, value, where)
    return [f"{where}: unsupported type {kind}"]


def _primitive_type_errors(kind: str, value: Any, where: str) -> list[str]:
    if kind == "string":
        ok = isinstance(value, str | int | float | bool)
        return [] if ok else [f"{where}: expected a string, got {type(value).__name__}"]
    if kind == "number":
        if isinstance(value, bool):
            return [f"{where}: expected a number, got bool"]
        if isinstance(value, int | float):
            return []
        if isinstance(value, str):
            try:
                float(value)
                return []
            except ValueError:
                pass
        return [f"{where}: expected a number, got {value!r}"]
    # a bool
    ok = isinstance(value, bool) or value in ("true", "false")
    return [] if ok else [f"{where}: expected a bool, got {value!r}"]


def _collection_type_errors(tf_type: TfType, value: Any, where: str) -> list[str]:
    kind = tf_type.kind
    if kind in ("list", "set", "tuple"):
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {type(value).__name__}"]
        if kind == "tuple":
            if len(value) != len(tf_type.items):
                return [f"{where}: expected {len(tf_type.items)} items, got {len(value)}"]
            return [
                e
                for i, (t, v) in enumerate(zip(tf_type.items, value, strict=True))
                for e in type_errors(t, v, f"{where}[{i}]")
            ]
        assert tf_type.elem is not None
        return [e for i, v in enumerate(value) for e in type_errors(tf_type.elem, v, f"{where}[{i}]")]
    # a map
    if not isinstance(value, Mapping):
        return [f"{where}: expected a map, got {type(value).__name__}"]
    assert tf_type.elem is not None
    return [e for k, v in value.items() for e in type_errors(tf_type.elem, v, f"{where}.{k}")]


def _object_type_errors(tf_type: TfType, value: Any, where: str) -> list[str]:
    if not isinstance(value, Mapping):
        return [f"{where}: expected an object, got {type(value).__name__}"]
    attrs = tf_type.attr_map()
    errors = [
        f"{where}: unknown attribute {k!r} (expected one of {', '.join(sorted(attrs))})"
        for k in value
        if k not in attrs
    ]
    for name, (attr_type, optional, _default) in attrs.items():
        if name not in value:
            if not optional:
                errors.append(f"{where}: missing required attribute {name!r}")
            continue
        errors.extend(type_errors(attr_type, value[name], f"{where}.{name}"))
    return errors


def load_json_tfvars(path: str | Path) -> dict[str, Any]:
    """Read a ``*.tfvars.json`` file."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise HclError(f"{path}: a tfvars.json file holds one JSON object")
    return data


def load_hcl_tfvars(path: str | Path) -> dict[str, Any]:
    """Read a ``*.tfvars`` file (HCL attributes only) into Python values."""
    try:
        doc = hcl2.loads(Path(path).read_text(encoding="utf-8"), serialization_options=_OPTIONS)
    except Exception as exc:  # lark's exceptions
        raise HclError(f"{path}: cannot parse HCL: {str(exc).splitlines()[0]}") from exc
    out: dict[str, Any] = {}
    for key, raw in doc.items():
        if key in META_KEYS:
            continue
        value = literal(raw)
        if value is UNKNOWN:
            raise HclError(f"{path}: {key}: tfvars values must be constants")
        out[key] = value
    return out

"""Offline check of Terraform modules against the alicloud provider schema (../shared/terraform).

The schema file lists, per resource type we may use, every argument with its flags (required, computed-only,
deprecated, removed), type, enumerated values, ranges and conflicts, as read from the provider's Go source.
:func:`check_module` parses a module with python-hcl2 and reports, per resource and nested block:

- unknown resource types and arguments (with the nearest valid names), arguments the provider removed,
  computed-only attributes set in configuration, deprecated arguments (we keep the module on current names);
- missing required arguments, arguments that conflict with each other, blocks written as attributes or the
  reverse, too many blocks;
- values outside the enumerated values, ranges, lengths and regular expressions the provider enforces, for
  every value an argument can take: a literal, a variable's default or a value passed for it, a local, an
  ``each.value`` field of a ``for_each`` map, a ``dynamic`` block's iterator. With ``strict`` an argument
  that has such a constraint but whose value cannot be worked out offline is a problem too, so that no
  constraint goes unchecked by accident.

It also holds the module conventions: every variable has a type and a description, a reusable module does
not configure providers, a ``module`` call passes only declared variables and every required one, and every
reference names a declared variable, local or resource and an attribute that resource type has.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.terraform.hcl import (
    META_KEYS,
    UNKNOWN,
    Block,
    HclError,
    TfConfig,
    apply_defaults,
    evaluate,
    is_expression,
    literal,
    load_dir,
    parse_expression,
    parse_template,
    parse_text,
    parse_type,
    traverse,
    unquote_label,
)

# Arguments every resource accepts that the provider schema does not list.
RESOURCE_META_ARGS = frozenset(
    {"count", "for_each", "depends_on", "provider", "lifecycle", "provisioner", "connection"}
)
MODULE_META_ARGS = frozenset({"source", "version", "count", "for_each", "depends_on", "providers"})


@dataclass(frozen=True)
class Problem:
    """One finding: where it is and what is wrong, printed as ``file:line: where: message``."""

    file: str
    line: int | None
    where: str
    message: str

    def __str__(self) -> str:
        line = f":{self.line}" if self.line else ""
        return f"{self.file}{line}: {self.where}: {self.message}"


def default_schema_path() -> Path:
    """../shared/terraform/alicloud-schema.json next to the repository (the CI layout)."""
    return Path(__file__).resolve().parents[2] / ".." / "shared" / "terraform" / "alicloud-schema.json"


def load_schema(path: str | Path | None = None) -> dict[str, Any]:
    """The provider schema: resource type -> argument -> spec (``__meta__`` dropped)."""
    data = json.loads(Path(path or default_schema_path()).read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if not k.startswith("__")}


# ---------------------------------------------------------------------------------------------------------
# Scopes: what var., local., each. and dynamic iterators can be
# ---------------------------------------------------------------------------------------------------------


Resolver = Callable[[tuple[Any, ...]], Any]


class ModuleScope:
    """Candidate values of ``var.*`` and ``local.*`` in one module."""

    def __init__(self, config: TfConfig, inputs: Mapping[str, Sequence[Any]] | None) -> None:
        self.config = config
        self.inputs = inputs or {}
        self._locals_raw = config.locals
        self._local_cache: dict[str, Any] = {}
        self._resolving: set[str] = set()
        self.var_values: dict[str, Any] = {
            name: self._variable_candidates(block) for name, block in config.variables.items()
        }

    def _variable_candidates(self, block: Block) -> Any:
        name = block.labels[0]
        try:
            tf_type = parse_type(block.body["type"]) if "type" in block.body else None
        except HclError:
            tf_type = None
        nullable = literal(block.body.get("nullable", True)) is not False
        candidates: list[Any] = []
        has_default = "default" in block.body
        default = literal(block.body["default"]) if has_default else UNKNOWN
        given = list(self.inputs.get(name, ()))
        if has_default and default is not UNKNOWN and not (given and default is None and nullable):
            candidates.append(default)
        for value in given:
            if value is None and not nullable:
                continue  # Terraform uses the default instead
            candidates.append(value)
        if not candidates:
            return UNKNOWN
        if tf_type is not None:
            candidates = [apply_defaults(tf_type, c) for c in candidates]
        return candidates

    def var(self, parts: tuple[Any, ...]) -> Any:
        if not parts:
            return UNKNOWN
        candidates = self.var_values.get(parts[0], UNKNOWN)
        return _follow(candidates, parts[1:])

    def local(self, parts: tuple[Any, ...]) -> Any:
        if not parts or parts[0] not in self._locals_raw:
            return UNKNOWN
        name = parts[0]
        if name not in self._local_cache:
            if name in self._resolving:
                return UNKNOWN
            self._resolving.add(name)
            self._local_cache[name] = self.value_of(self._locals_raw[name], self.scope())
            self._resolving.discard(name)
        return _follow(self._local_cache[name], parts[1:])

    def scope(self, **extra: Resolver) -> dict[str, Resolver]:
        return {"var": self.var, "local": self.local, **extra}

    @staticmethod
    def value_of(raw: Any, scope: Mapping[str, Resolver]) -> Any:
        """Candidate values of one parsed argument value, or UNKNOWN."""
        if is_expression(raw):
            try:
                return evaluate(parse_expression(raw[2:-1]), scope)
            except HclError:
                return UNKNOWN
        if isinstance(raw, list):
            items = [ModuleScope.value_of(v, scope) for v in raw]
            return UNKNOWN if any(i is UNKNOWN for i in items) else [[v for i in items for v in i]]
        if isinstance(raw, str) and len(raw) >= 2 and raw[0] == raw[-1] == '"' and "${" in raw:
            try:
                return evaluate(parse_template(raw[1:-1]), scope)
            except HclError:
                return UNKNOWN
        value = literal(raw)
        return UNKNOWN if value is UNKNOWN else [value]


def _follow(candidates: Any, parts: tuple[Any, ...]) -> Any:
    if candidates is UNKNOWN:
        return UNKNOWN
    out = [traverse(c, parts) for c in candidates]
    return UNKNOWN if any(v is UNKNOWN for v in out) else out


def _each_resolver(for_each_values: Any) -> Resolver:
    """``each.key`` / ``each.value...`` over every candidate map or set of a for_each."""

    def resolve(parts: tuple[Any, ...]) -> Any:
        if for_each_values is UNKNOWN or not parts:
            return UNKNOWN
        keys: list[Any] = []
        values: list[Any] = []
        for collection in for_each_values:
            if isinstance(collection, Mapping):
                keys.extend(collection.keys())
                values.extend(collection.values())
            elif isinstance(collection, list):
                keys.extend(collection)
                values.extend(collection)
            else:
                return UNKNOWN
        if parts[0] == "key":
            return keys if len(parts) == 1 else UNKNOWN
        if parts[0] == "value":
            return _follow(values, parts[1:])
        return UNKNOWN

    return resolve


def _iterator_resolver(for_each_values: Any) -> Resolver:
    """A dynamic block's iterator: ``<name>.value...`` over the elements of every candidate collection."""

    def resolve(parts: tuple[Any, ...]) -> Any:
        if for_each_values is UNKNOWN or not parts or parts[0] != "value":
            return UNKNOWN
        elements: list[Any] = []
        for collection in for_each_values:
            if isinstance(collection, Mapping):
                elements.extend(collection.values())
            elif isinstance(collection, list):
                elements.extend(collection)
            else:
                return UNKNOWN
        return _follow(elements, parts[1:])

    return resolve


# ---------------------------------------------------------------------------------------------------------
# Argument rules
# ---------------------------------------------------------------------------------------------------------


def _nearest(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


_STRING_MATCH = re.compile(r"StringMatch\(regexp\.MustCompile\(`(?P<re>[^`]*)`\)")


def _value_problems(spec: Mapping[str, Any], candidates: list[Any]) -> list[str]:
    """What is wrong with each possible value of one argument (enumerations, ranges, lengths, patterns)."""
    problems: list[str] = []
    kind = spec.get("type")
    is_list = kind == "list"
    allowed = spec.get("elem_values") or spec.get("values") if is_list else spec.get("values")
    for value in candidates:
        if value is None:
            continue  # null: the argument is left unset
        elements = value if is_list and isinstance(value, list) else [value]
        if is_list and not isinstance(value, list):
            problems.append(f"expected a list, got {value!r}")
            continue
        if is_list:
            if "max_items" in spec and len(value) > spec["max_items"]:
                problems.append(f"at most {spec['max_items']} items allowed, got {len(value)}")
            if "min_items" in spec and len(value) < spec["min_items"]:
                problems.append(f"at least {spec['min_items']} items required, got {len(value)}")
        for element in elements:
            problems.extend(_scalar_problems(spec, element, allowed, "string" if is_list else kind))
    return sorted(set(problems))


def _scalar_problems(spec: Mapping[str, Any], value: Any, allowed: Any, kind: str | None) -> list[str]:
    out: list[str] = []
    if kind in ("int", "number") and not isinstance(value, bool):
        if isinstance(value, str):
            try:
                value = float(value) if kind == "number" or "." in value else int(value)
            except ValueError:
                return [f"expected a number, got {value!r}"]
        if kind == "int" and isinstance(value, float) and not value.is_integer():
            out.append(f"expected a whole number, got {value!r}")
    elif kind == "bool" and not isinstance(value, bool) and value not in ("true", "false"):
        return [f"expected true or false, got {value!r}"]
    return out + _limit_problems(spec, value, allowed)


def _limit_problems(spec: Mapping[str, Any], value: Any, allowed: Any) -> list[str]:
    """Enumerated values, numeric range, string length and the provider's string validations."""
    out: list[str] = []
    if allowed is not None:
        normalized = {str(a) for a in allowed}
        shown = value if not isinstance(value, float) or not value.is_integer() else int(value)
        if str(shown) not in normalized:
            out.append(f"invalid value {shown!r}; valid values: {', '.join(map(str, allowed))}")
    if "range" in spec and isinstance(value, int | float) and not isinstance(value, bool):
        lo, hi = spec["range"]
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            out.append(
                f"{value!r} is outside the range {lo if lo is not None else '-inf'}.."
                f"{hi if hi is not None else 'inf'}"
            )
    if "length" in spec and isinstance(value, str):
        lo, hi = spec["length"]
        if not lo <= len(value) <= hi:
            out.append(f"length {len(value)} is outside {lo}..{hi}")
    for rule in spec.get("validate_raw", ()):
        m = _STRING_MATCH.search(rule)
        if m and isinstance(value, str) and not re.search(m.group("re"), value):
            out.append(f"{value!r} does not match {m.group('re')}")
        if rule == "validation.StringIsJSON" and isinstance(value, str):
            try:
                json.loads(value)
            except ValueError:
                out.append("is not valid JSON")
    return out


def _has_value_constraint(spec: Mapping[str, Any]) -> bool:
    return any(k in spec for k in ("values", "elem_values", "range", "length")) or any(
        _STRING_MATCH.search(r) for r in spec.get("validate_raw", ())
    )


class _Checker:
    def __init__(self, schema: Mapping[str, Any], scope: ModuleScope, strict: bool) -> None:
        self.schema = schema
        self.scope = scope
        self.strict = strict
        self.problems: list[Problem] = []

    def report(self, block: Block, where: str, message: str, line: int | None = None) -> None:
        self.problems.append(Problem(block.file, line or block.line, where, message))

    def check_resource(self, block: Block) -> None:
        rtype, rname = block.labels
        where = f"{rtype}.{rname}"
        spec = self.schema.get(rtype)
        if spec is None:
            hint = _nearest(rtype, list(self.schema))
            self.report(block, where, f"resource type not in the provider schema{hint}")
            return
        extra: dict[str, Resolver] = {}
        if "for_each" in block.body:
            extra["each"] = _each_resolver(self.scope.value_of(block.body["for_each"], self.scope.scope()))
        self.check_body(block, where, spec, block.body, self.scope.scope(**extra), RESOURCE_META_ARGS)

    def check_body(
        self,
        block: Block,
        where: str,
        spec: Mapping[str, Any],
        body: Mapping[str, Any],
        scope: dict[str, Resolver],
        meta: frozenset[str] = frozenset(),
    ) -> None:
        args = {k: v for k, v in body.items() if k not in META_KEYS and k not in meta and k != "dynamic"}
        dynamic: dict[str, list[Mapping[str, Any]]] = {}
        for entry in body.get("dynamic", []) or []:
            for label, dyn in entry.items():
                if label not in META_KEYS:
                    dynamic.setdefault(unquote_label(label), []).append(dyn)
        names = [k for k in spec if not k.startswith("__")]
        present = set(args) | set(dynamic)
        for name, raw in args.items():
            self.check_argument(block, f"{where}.{name}", name, spec, names, raw, scope)
        for name, entries in dynamic.items():
            self.check_dynamic(block, f"{where}.{name}", name, spec, names, entries, scope)
        self.check_presence(block, where, spec, names, present, args)

    def check_argument(
        self,
        block: Block,
        arg_where: str,
        name: str,
        spec: Mapping[str, Any],
        names: list[str],
        raw: Any,
        scope: dict[str, Resolver],
    ) -> None:
        """One argument or nested block written in the body."""
        line = block.line_of(name)
        arg = spec.get(name)
        if arg is None:
            self.report(block, arg_where, f"unknown argument{_nearest(name, names)}", line)
            return
        if not self._usable(block, arg_where, arg, line):
            return
        is_block = _is_block_value(raw)
        if arg.get("type") == "block":
            if not is_block:
                self.report(block, arg_where, f"is a block: write `{name} {{ ... }}`, not an attribute", line)
                return
            bodies = raw if isinstance(raw, list) else [raw]
            if "max_items" in arg and len(bodies) > arg["max_items"]:
                self.report(
                    block, arg_where, f"at most {arg['max_items']} block(s) allowed, got {len(bodies)}", line
                )
            for nested in bodies:
                self.check_body(block, arg_where, arg.get("block", {}), nested, scope)
            return
        if is_block:
            self.report(block, arg_where, f"is an argument: write `{name} = ...`, not a block", line)
            return
        self.check_value(block, arg_where, arg, raw, scope, line)

    def check_dynamic(
        self,
        block: Block,
        arg_where: str,
        name: str,
        spec: Mapping[str, Any],
        names: list[str],
        entries: list[Mapping[str, Any]],
        scope: dict[str, Resolver],
    ) -> None:
        """A ``dynamic "name"`` block: its content checked with the iterator bound to the for_each values."""
        arg = spec.get(name)
        if arg is None:
            self.report(block, arg_where, f"unknown block{_nearest(name, names)}", block.line_of(name))
            return
        if not self._usable(block, arg_where, arg, None):
            return
        if arg.get("type") != "block":
            self.report(block, arg_where, "is an argument, not a block: it cannot be dynamic")
            return
        for dyn in entries:
            iterator = literal(dyn.get("iterator", name))
            iterator = iterator if isinstance(iterator, str) else name
            values = self.scope.value_of(dyn.get("for_each"), scope)
            inner_scope = {**scope, iterator: _iterator_resolver(values)}
            for content in dyn.get("content", []) or []:
                self.check_body(block, arg_where, arg.get("block", {}), content, inner_scope)

    def check_presence(
        self,
        block: Block,
        where: str,
        spec: Mapping[str, Any],
        names: list[str],
        present: set[str],
        args: Mapping[str, Any],
    ) -> None:
        """Required arguments missing, and pairs the schema says conflict (each pair once)."""
        for name in names:
            if spec[name].get("required") and name not in present:
                self.report(block, f"{where}.{name}", "missing required argument")
        reported: set[frozenset[str]] = set()
        for name in sorted(present):
            for other in spec.get(name, {}).get("conflicts_with", ()):
                pair = frozenset((name, other))
                if (
                    other in present
                    and pair not in reported
                    and not _is_null(args.get(name))
                    and not _is_null(args.get(other))
                ):
                    reported.add(pair)
                    self.report(block, f"{where}.{name}", f"conflicts with {other}", block.line_of(name))

    def _usable(self, block: Block, where: str, arg: Mapping[str, Any], line: int | None) -> bool:
        if arg.get("removed"):
            self.report(block, where, f"removed from the provider: {arg['removed']}", line)
            return False
        if arg.get("attribute_only"):
            self.report(block, where, "is computed by the provider and cannot be set", line)
            return False
        if arg.get("deprecated"):
            self.report(block, where, f"deprecated: {arg['deprecated']}", line)
        return True

    def check_value(
        self,
        block: Block,
        where: str,
        arg: Mapping[str, Any],
        raw: Any,
        scope: Mapping[str, Resolver],
        line: int | None,
    ) -> None:
        candidates = self.scope.value_of(raw, scope)
        if candidates is UNKNOWN:
            if self.strict and _has_value_constraint(arg) and not _is_reference_to_resource(raw):
                self.report(
                    block,
                    where,
                    "has enumerated values or limits but its value cannot be worked "
                    "out offline (use a literal, a variable, a local or an each.value field)",
                    line,
                )
            return
        for message in _value_problems(arg, candidates):
            self.report(block, where, message, line)


def _is_block_value(raw: Any) -> bool:
    items = raw if isinstance(raw, list) else [raw]
    return bool(items) and all(isinstance(i, Mapping) and i.get("__is_block__") for i in items)


def _is_null(raw: Any) -> bool:
    return raw is None or raw == "${null}"


_RESOURCE_REF = re.compile(r"^\$\{(alicloud_[a-z0-9_]+)\.")


def _is_reference_to_resource(raw: Any) -> bool:
    """Values taken from another resource's attributes were validated where that resource is declared."""
    return isinstance(raw, str) and bool(_RESOURCE_REF.match(raw))


# ---------------------------------------------------------------------------------------------------------
# Module conventions
# ---------------------------------------------------------------------------------------------------------


def _variable_problems(config: TfConfig) -> list[Problem]:
    out: list[Problem] = []
    for name, block in config.variables.items():
        for key in ("type", "description"):
            if key not in block.body:
                out.append(Problem(block.file, block.line, f"variable.{name}", f"has no {key}"))
        if "type" in block.body:
            try:
                parse_type(block.body["type"])
            except HclError as exc:
                out.append(Problem(block.file, block.line, f"variable.{name}", f"type cannot be read: {exc}"))
    for block in config.of("output"):
        if "description" not in block.body:
            out.append(Problem(block.file, block.line, f"output.{block.labels[0]}", "has no description"))
    for block in config.of("provider"):
        if not _is_root(config):
            out.append(
                Problem(
                    block.file,
                    block.line,
                    f"provider.{block.labels[0]}",
                    "a reusable module must not configure providers (the caller does)",
                )
            )
    return out


def _is_root(config: TfConfig) -> bool:
    """Examples are root modules (they call the module and configure the provider); the module is not."""
    return any(b.kind == "module" for b in config.blocks)


def _module_call_problems(config: TfConfig) -> list[Problem]:
    out: list[Problem] = []
    for block in config.of("module"):
        source = literal(block.body.get("source"))
        where = f"module.{block.labels[0]}"
        if not isinstance(source, str) or not source.startswith("."):
            continue  # registry modules are not ours to check
        target = (config.path / source).resolve()
        try:
            callee = load_dir(target)
        except HclError as exc:
            out.append(Problem(block.file, block.line, where, str(exc)))
            continue
        declared = callee.variables
        if not declared and not callee.blocks:
            out.append(Problem(block.file, block.line, where, f"source {source} holds no Terraform files"))
            continue
        given = {k for k in block.body if k not in META_KEYS and k not in MODULE_META_ARGS}
        for name in sorted(given - set(declared)):
            out.append(
                Problem(
                    block.file,
                    block.line,
                    f"{where}.{name}",
                    f"the module declares no such variable{_nearest(name, list(declared))}",
                )
            )
        for name, var in declared.items():
            if "default" not in var.body and name not in given:
                out.append(
                    Problem(block.file, block.line, f"{where}.{name}", "missing required module input")
                )
    return out


_REFERENCE = re.compile(
    r"(?<![\w.])(?P<type>alicloud_[a-z0-9_]+)\.(?P<name>[A-Za-z_][\w-]*)(?:\[[^\]]*\])*\.(?P<attr>[a-z_][a-z0-9_]*)"
)
_LOCAL_OR_VAR = re.compile(r"(?<![\w.])(?P<kind>var|local)\.(?P<name>[A-Za-z_][\w-]*)")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, Mapping):
        return [s for k, v in value.items() if k not in META_KEYS for s in _strings(v)]
    return []


def _reference_problems(config: TfConfig, schema: Mapping[str, Any]) -> list[Problem]:
    """References to resources, variables and locals must name things that exist: an ``alicloud_x.name.attr``
    needs that resource in the module and ``attr`` in the schema (or ``id``)."""
    declared = {(b.labels[0], b.labels[1]) for b in config.resources()}
    variables = set(config.variables)
    local_names = set(config.locals)
    out: list[Problem] = []
    for block in config.blocks:
        if block.kind not in ("resource", "output", "locals", "module", "provider"):
            continue
        where = ".".join((block.kind, *block.labels)) if block.kind != "resource" else ".".join(block.labels)
        seen: set[str] = set()
        for text in _strings(block.body):
            for m in _REFERENCE.finditer(text):
                rtype, name, attr = m.group("type"), m.group("name"), m.group("attr")
                key = f"{rtype}.{name}.{attr}"
                if key in seen:
                    continue
                seen.add(key)
                if (rtype, name) not in declared:
                    out.append(
                        Problem(
                            block.file,
                            block.line,
                            where,
                            f"references {rtype}.{name}, which the module does not declare",
                        )
                    )
                elif attr != "id" and attr not in schema.get(rtype, {}):
                    known = [k for k in schema.get(rtype, {}) if not k.startswith("__")] + ["id"]
                    out.append(
                        Problem(
                            block.file,
                            block.line,
                            where,
                            f"references {key}: no attribute {attr!r}{_nearest(attr, known)}",
                        )
                    )
            for m in _LOCAL_OR_VAR.finditer(text):
                kind, name = m.group("kind"), m.group("name")
                key = f"{kind}.{name}"
                if key in seen:
                    continue
                seen.add(key)
                if (kind == "var" and name not in variables) or (kind == "local" and name not in local_names):
                    hint = _nearest(name, sorted(variables if kind == "var" else local_names))
                    out.append(
                        Problem(
                            block.file, block.line, where, f"references {key}, which is not declared{hint}"
                        )
                    )
    return out


# ---------------------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------------------


def check_config(
    config: TfConfig,
    schema: Mapping[str, Any],
    *,
    inputs: Mapping[str, Sequence[Any]] | None = None,
    strict: bool = True,
) -> list[Problem]:
    """Check one parsed module; ``inputs`` adds candidate values for its variables (tfvars, a caller)."""
    scope = ModuleScope(config, inputs)
    checker = _Checker(schema, scope, strict)
    for block in config.of("data"):
        checker.report(block, f"data.{'.'.join(block.labels)}", "data sources are not covered by the schema")
    for block in config.resources():
        checker.check_resource(block)
    return [
        *_variable_problems(config),
        *_module_call_problems(config),
        *checker.problems,
        *_reference_problems(config, schema),
    ]


def check_module(
    path: str | Path,
    schema: Mapping[str, Any] | None = None,
    *,
    inputs: Mapping[str, Sequence[Any]] | None = None,
    strict: bool = True,
) -> list[Problem]:
    """Check every ``*.tf`` file of one directory against the schema (the default schema file if None)."""
    return check_config(
        load_dir(path), schema if schema is not None else load_schema(), inputs=inputs, strict=strict
    )


def check_text(
    text: str,
    schema: Mapping[str, Any],
    *,
    filename: str = "snippet.tf",
    inputs: Mapping[str, Sequence[Any]] | None = None,
    strict: bool = True,
) -> list[Problem]:
    """Check a snippet of HCL (tests feed deliberately broken ones)."""
    config = TfConfig(Path("."), parse_text(text, filename))
    return check_config(config, schema, inputs=inputs, strict=strict)

"""A small PromQL parser for checking dashboard queries without a Prometheus.

It covers the language the dashboard uses and a little more: number and string literals, vector
selectors with matchers, range selectors and subqueries, ``offset`` and ``@``, aggregations with
``by``/``without`` and a parameter, calls to Prometheus's functions with their argument types,
unary and binary operators with PromQL's precedence, ``bool``, ``on``/``ignoring`` and
``group_left``/``group_right``. It checks types the way Prometheus does (``rate`` needs a range
vector, a range vector cannot be an operand, ...) and reports the metric names and labels a query
reads. It is a sanity check, not Prometheus: the end-to-end tests send the same queries to a real
one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum


class PromQLError(ValueError):
    """The query does not parse or does not type-check; the message says where."""


class Kind(Enum):
    SCALAR = "scalar"
    INSTANT = "instant vector"
    RANGE = "range vector"
    STRING = "string"


S, V, M, STR = Kind.SCALAR, Kind.INSTANT, Kind.RANGE, Kind.STRING


def _a(kind: Kind) -> str:
    return ("an " if kind is Kind.INSTANT else "a ") + kind.value


_RANGE_FUNCTIONS = (
    "rate", "irate", "increase", "delta", "idelta", "deriv", "changes", "resets",
    "avg_over_time", "min_over_time", "max_over_time", "sum_over_time", "count_over_time",
    "stddev_over_time", "stdvar_over_time", "last_over_time", "present_over_time",
    "absent_over_time", "mad_over_time",
)  # fmt: skip
_VECTOR_FUNCTIONS = (
    "abs", "ceil", "floor", "exp", "ln", "log2", "log10", "sqrt", "sgn", "timestamp",
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "sin", "sinh", "tan", "tanh",
    "deg", "rad", "absent", "histogram_count", "histogram_sum", "histogram_avg",
    "histogram_stddev", "histogram_stdvar",
)  # fmt: skip
_TIME_FUNCTIONS = (
    "day_of_month", "day_of_week", "day_of_year", "days_in_month", "hour", "minute", "month", "year",
)  # fmt: skip

#: Prometheus functions: argument kinds, how many trailing ones are optional, and the result kind.
FUNCTIONS: dict[str, tuple[tuple[Kind, ...], int, Kind]] = {
    **{f: ((M,), 0, V) for f in _RANGE_FUNCTIONS},
    **{f: ((V,), 0, V) for f in _VECTOR_FUNCTIONS},
    **{f: ((V,), 1, V) for f in _TIME_FUNCTIONS},
    "round": ((V, S), 1, V),
    "clamp": ((V, S, S), 0, V),
    "clamp_min": ((V, S), 0, V),
    "clamp_max": ((V, S), 0, V),
    "histogram_quantile": ((S, V), 0, V),
    "histogram_fraction": ((S, S, V), 0, V),
    "quantile_over_time": ((S, M), 0, V),
    "predict_linear": ((M, S), 0, V),
    "holt_winters": ((M, S, S), 0, V),
    "label_replace": ((V, STR, STR, STR, STR), 0, V),
    "label_join": ((V, STR, STR, STR), 0, V),
    "sort": ((V,), 0, V),
    "sort_desc": ((V,), 0, V),
    "scalar": ((V,), 0, S),
    "vector": ((S,), 0, V),
    "time": ((), 0, S),
    "pi": ((), 0, S),
}

#: Aggregation operators and the kind of their parameter (None: no parameter).
AGGREGATIONS: dict[str, Kind | None] = {
    "sum": None, "min": None, "max": None, "avg": None, "group": None, "stddev": None,
    "stdvar": None, "count": None, "count_values": STR, "topk": S, "bottomk": S, "quantile": S,
    "limitk": S, "limit_ratio": S,
}  # fmt: skip

_SET_OPS = ("and", "or", "unless")
_COMPARISONS = ("==", "!=", "<=", ">=", "<", ">")
#: Binary operators by precedence, lowest first; ``^`` is right-associative.
_PRECEDENCE: tuple[tuple[str, ...], ...] = (
    ("or",),
    ("and", "unless"),
    _COMPARISONS,
    ("+", "-"),
    ("*", "/", "%", "atan2"),
    ("^",),
)
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![\w.]))
  | (?P<number>(?:0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[Ii]nf|NaN)(?![\w:]))
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)
  | (?P<ident>[a-zA-Z_][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|==|!=|<=|>=|[-+*/%^<>=(){}\[\],:@])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    pos: int


def tokenize(query: str) -> list[Token]:
    """Split ``query`` into tokens; an unknown character is an error with its position."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(query):
        match = _TOKEN.match(query, pos)
        if match is None:
            raise PromQLError(f"unexpected character {query[pos]!r} at {pos}")
        kind = match.lastgroup or ""
        if kind != "ws":
            tokens.append(Token(kind, match.group(), pos))
        pos = match.end()
    tokens.append(Token("eof", "", len(query)))
    return tokens


@dataclass(frozen=True)
class Selector:
    """One vector selector: its metric name (if any) and its label matchers."""

    name: str | None
    matchers: tuple[tuple[str, str, str], ...]

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The metric names it can read: its name, or a ``__name__`` equality or plain alternation."""
        if self.name:
            return (self.name,)
        for label, op, value in self.matchers:
            if label == "__name__" and op == "=":
                return (value,)
            if (
                label == "__name__"
                and op == "=~"
                and re.fullmatch(r"[a-zA-Z_:][\w:]*(\|[a-zA-Z_:][\w:]*)*", value)
            ):
                return tuple(value.split("|"))
        return ()


@dataclass
class Query:
    """What a parsed query reads."""

    kind: Kind
    selectors: list[Selector] = field(default_factory=list)
    #: Labels named in ``by``, ``without``, ``on``, ``ignoring`` and ``group_*`` clauses.
    grouping_labels: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)

    @property
    def metric_names(self) -> set[str]:
        return {name for s in self.selectors for name in s.metric_names}


def _unquote(text: str) -> str:
    if text.startswith("`"):
        return text[1:-1]
    body = text[1:-1]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def _matches_empty(op: str, value: str) -> bool:
    """Whether a label matcher accepts a series that lacks the label (an empty value)."""
    if op == "=":
        return value == ""
    if op == "!=":
        return value != ""
    found = re.fullmatch(value, "") is not None
    return found if op == "=~" else not found


class _Parser:
    def __init__(self, query: str) -> None:
        self.query = query
        self.tokens = tokenize(query)
        self.i = 0
        self.result = Query(kind=S)

    # --- token helpers -----------------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def _error(self, message: str) -> PromQLError:
        tok = self.tok
        where = f"at {tok.pos}" if tok.kind != "eof" else "at the end"
        return PromQLError(f"{message} {where} (near {self.query[tok.pos : tok.pos + 20]!r})")

    def _is(self, text: str) -> bool:
        return self.tok.kind in ("op", "ident") and self.tok.text == text

    def _take(self, text: str) -> Token:
        if not self._is(text):
            raise self._error(f"expected {text!r}")
        tok = self.tok
        self.i += 1
        return tok

    def _take_kind(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            raise self._error(f"expected {what}")
        tok = self.tok
        self.i += 1
        return tok

    # --- grammar -----------------------------------------------------------------------------------

    def parse(self) -> Query:
        self.result.kind = self._expr(0)
        if self.tok.kind != "eof":
            raise self._error("unexpected token")
        return self.result

    def _binary_op(self, level: int) -> str | None:
        ops = _PRECEDENCE[level]
        tok = self.tok
        if tok.kind in ("op", "ident") and tok.text in ops:
            return tok.text
        return None

    def _expr(self, level: int) -> Kind:
        if level == len(_PRECEDENCE):
            return self._unary()
        left = self._expr(level + 1)
        while (op := self._binary_op(level)) is not None:
            self.i += 1
            is_bool = False
            if self._is("bool"):
                if op not in _COMPARISONS:
                    raise self._error("bool only modifies a comparison")
                self.i += 1
                is_bool = True
            matching = self._vector_matching()
            # ^ is right-associative: its right side binds at the same level.
            right = self._expr(level if op == "^" else level + 1)
            left = self._binary_kind(op, left, right, is_bool=is_bool, matching=matching)
            if op == "^":
                break
        return left

    def _vector_matching(self) -> bool:
        found = False
        if self._is("on") or self._is("ignoring"):
            self.i += 1
            self.result.grouping_labels |= set(self._label_list())
            found = True
        if self._is("group_left") or self._is("group_right"):
            if not found:
                raise self._error("group_left/group_right need on(...) or ignoring(...)")
            self.i += 1
            if self._is("("):
                self.result.grouping_labels |= set(self._label_list())
        return found

    def _binary_kind(self, op: str, left: Kind, right: Kind, *, is_bool: bool, matching: bool) -> Kind:
        for side in (left, right):
            if side in (M, STR):
                raise self._error(f"{_a(side)} cannot be an operand of {op!r}")
        if op in _SET_OPS:
            if left is not V or right is not V:
                raise self._error(f"{op!r} needs instant vectors on both sides")
            return V
        if matching and (left is not V or right is not V):
            raise self._error("vector matching needs vectors on both sides")
        if op in _COMPARISONS and left is S and right is S and not is_bool:
            raise self._error("comparisons between scalars need bool")
        return V if V in (left, right) else S

    def _unary(self) -> Kind:
        if self._is("-") or self._is("+"):
            self.i += 1
            kind = self._unary()
            if kind not in (S, V):
                raise self._error(f"unary sign on {_a(kind)}")
            return kind
        return self._postfix(*self._primary())

    def _postfix(self, kind: Kind, is_selector: bool) -> Kind:
        if self._is("["):
            self.i += 1
            self._take_kind("duration", "a duration")
            if self._is(":"):
                self.i += 1
                if self.tok.kind == "duration":
                    self.i += 1
                if kind is not V:
                    raise self._error(f"a subquery needs an instant vector, not {_a(kind)}")
            elif not is_selector:
                raise self._error("a range needs a vector selector (or a subquery with ':')")
            self._take("]")
            kind = M
        while self._is("offset") or self._is("@"):
            if kind not in (V, M):
                raise self._error("offset and @ modify vectors")
            if self._take(self.tok.text).text == "offset":
                if self._is("-"):
                    self.i += 1
                self._take_kind("duration", "a duration after offset")
            elif self.tok.kind == "number":
                self.i += 1
            elif self._is("start") or self._is("end"):
                self.i += 1
                self._take("(")
                self._take(")")
            else:
                raise self._error("expected a timestamp, start() or end() after @")
        return kind

    def _primary(self) -> tuple[Kind, bool]:
        """The kind of the next operand, and whether it is a bare vector selector (which may take a range)."""
        tok = self.tok
        if tok.kind == "number":
            self.i += 1
            return S, False
        if tok.kind == "duration":
            raise self._error("a duration is only valid in [...] or after offset")
        if tok.kind == "string":
            self.i += 1
            return STR, False
        if self._is("("):
            self.i += 1
            kind = self._expr(0)
            self._take(")")
            return kind, False
        if self._is("{"):
            self._selector(None)
            return V, True
        if tok.kind == "ident":
            name = tok.text
            following = self.tokens[self.i + 1]
            if name in AGGREGATIONS and (following.text in ("(", "by", "without")):
                return self._aggregation(), False
            if following.text == "(" and following.kind == "op":
                return self._call(), False
            if name in _KEYWORDS or name in _SET_OPS or name == "atan2":
                raise self._error(f"unexpected keyword {name!r}")
            self.i += 1
            self._selector(name)
            return V, True
        raise self._error("expected an expression")

    def _selector(self, name: str | None) -> None:
        matchers: list[tuple[str, str, str]] = []
        if self._is("{"):
            self.i += 1
            while not self._is("}"):
                label = self._take_kind("ident", "a label name").text
                op_tok = self.tok
                if op_tok.text not in ("=", "!=", "=~", "!~"):
                    raise self._error("expected a matcher operator (=, !=, =~, !~)")
                self.i += 1
                value = _unquote(self._take_kind("string", "a quoted label value").text)
                if op_tok.text in ("=~", "!~"):
                    try:
                        re.compile(value)
                    except re.error as exc:
                        raise self._error(f"bad regular expression {value!r}: {exc}") from None
                matchers.append((label, op_tok.text, value))
                if not self._is("}"):
                    self._take(",")
            self._take("}")
        if name is None and all(_matches_empty(op, value) for _, op, value in matchers):
            raise self._error(
                "a selector needs a metric name or a matcher that does not match the empty string"
            )
        self.result.selectors.append(Selector(name, tuple(matchers)))

    def _label_list(self) -> list[str]:
        self._take("(")
        labels: list[str] = []
        while not self._is(")"):
            labels.append(self._take_kind("ident", "a label name").text)
            if not self._is(")"):
                self._take(",")
        self._take(")")
        return labels

    def _grouping(self) -> None:
        if self._is("by") or self._is("without"):
            self.i += 1
            self.result.grouping_labels |= set(self._label_list())

    def _aggregation(self) -> Kind:
        name = self.tok.text
        self.i += 1
        self._grouping()
        self._take("(")
        param = AGGREGATIONS[name]
        if param is not None:
            got = self._expr(0)
            if got is not param:
                raise self._error(f"{name} needs {_a(param)} parameter, got {_a(got)}")
            self._take(",")
        kind = self._expr(0)
        if kind is not V:
            raise self._error(f"{name} aggregates an instant vector, not {_a(kind)}")
        self._take(")")
        self._grouping()
        self.result.functions.add(name)
        return V

    def _call(self) -> Kind:
        name = self.tok.text
        if name not in FUNCTIONS:
            raise self._error(f"unknown function {name!r}")
        self.i += 1
        self._take("(")
        kinds: list[Kind] = []
        while not self._is(")"):
            kinds.append(self._expr(0))
            if not self._is(")"):
                self._take(",")
        self._take(")")
        params, optional, result = FUNCTIONS[name]
        if not len(params) - optional <= len(kinds) <= len(params):
            raise self._error(f"{name} takes {len(params)} arguments, got {len(kinds)}")
        for index, (want, got) in enumerate(zip(params, kinds, strict=False)):
            if want is not got:
                raise self._error(f"argument {index + 1} of {name} must be {_a(want)}, got {_a(got)}")
        self.result.functions.add(name)
        return result


def parse(query: str) -> Query:
    """Parse and type-check one PromQL expression; raises :class:`PromQLError`."""
    if not query.strip():
        raise PromQLError("empty query")
    return _Parser(query).parse()


#: Grafana's interval variables, replaced before parsing (template variables stay inside strings).
GRAFANA_INTERVALS = (
    "$__rate_interval",
    "$__interval",
    "$__range",
    "${__rate_interval}",
    "${__interval}",
    "${__range}",
)


def expand_grafana(expr: str, interval: str = "5m") -> str:
    """``expr`` with Grafana's interval variables replaced by a duration."""
    for variable in GRAFANA_INTERVALS:
        expr = expr.replace(variable, interval)
    return expr

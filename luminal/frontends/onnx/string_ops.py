"""The string ops of ONNX as host computations on NumPy `object` arrays of Python `str`.

One function per op: `fn(node, *inputs, **attributes) -> list of arrays`, `node` the
`strings.HostString` step (its `label` for errors, `opset`, and `cache` for what a node builds once). Where the ONNX spec leaves a behaviour open, onnxruntime's
is followed and said so; where the spec and onnxruntime disagree, the comment says which wins.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from luminal.frontends.onnx import re2
from luminal.frontends.onnx.errors import OnnxError, OnnxImportError
from luminal.frontends.onnx.importer import initializer_array

TP = onnx.TensorProto
OPS: dict[tuple[str, str], object] = {}  # (domain, op type) -> fn
ML = "ai.onnx.ml"


def host_op(name: str, domain: str = ""):
    def register(fn):
        OPS[(domain, name)] = fn
        return fn

    return register


def strings(node, x: np.ndarray, what: str = "input 0") -> np.ndarray:
    """`x` as an object array of str (bytes decoded as UTF-8); a named error for anything else."""
    x = np.asarray(x)
    if x.dtype.kind in "US":
        x = x.astype(object)
    if x.dtype != object:
        raise OnnxError(f"{node.label}: {what} is a {x.dtype} tensor; it takes strings")
    if all(type(v) is str for v in x.reshape(-1).tolist()):
        return x
    out = np.empty(x.shape, object)
    flat, dst = x.reshape(-1), out.reshape(-1)
    for i, v in enumerate(flat):
        if isinstance(v, bytes):
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError:
                raise OnnxError(f"{node.label}: {what} element {i} is not valid UTF-8") from None
        elif not isinstance(v, str):
            raise OnnxError(f"{node.label}: {what} element {i} is a {type(v).__name__}, not a string")
        dst[i] = v
    return out


def _map(fn, *arrays, otype=object) -> np.ndarray:
    """fn applied element by element, broadcasting; the result always an array (0-d included)."""
    shape = np.broadcast_shapes(*(a.shape for a in arrays))  # a ValueError: HostStep names the node
    flat = [np.broadcast_to(a, shape).reshape(-1).tolist() for a in arrays]
    out = np.empty(int(np.prod(shape)), otype)
    for i, vals in enumerate(zip(*flat)):
        out[i] = fn(*vals)
    return out.reshape(shape)


# --- case mapping: onnxruntime's is per character (C++ towupper / towlower), one code point to
# one, so 'ß' stays 'ß' in upper case, 'ﬁ' stays 'ﬁ', and no context rule (Greek final sigma)
_LOWER_SPECIAL = {"\u0130": "i"}  # İ: Unicode's simple lowercase mapping; Python's full one adds a dot


def _upper_char(ch: str) -> str:
    u = ch.upper()
    return u if len(u) == 1 else ch


def _lower_char(ch: str) -> str:
    if ch in _LOWER_SPECIAL:
        return _LOWER_SPECIAL[ch]
    lo = ch.lower()
    return lo if len(lo) == 1 else ch


def upper(s: str) -> str:
    return s if s.isascii() and not any("a" <= c <= "z" for c in s) else "".join(map(_upper_char, s))


def lower(s: str) -> str:
    return "".join(map(_lower_char, s))


# locales whose case rules differ from Unicode's default ones (Turkish/Azeri dotted i, Lithuanian)
_LOCALE_RULES = ("tr", "az", "lt")


@host_op("StringNormalizer")
def string_normalizer(node, x, case_change_action="NONE", is_case_sensitive=0, locale="en_US", stopwords=None):
    """Stopwords removed (compared case-insensitively unless is_case_sensitive), then the case
    changed. Input [C] or [1, C]; when every string is removed the output is [""] of shape [1]
    (or [1, 1]), as the spec says. An empty input gives that too (onnxruntime refuses it)."""
    x = strings(node, x)
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
        raise OnnxError(f"{node.label}: the input has shape {x.shape}; StringNormalizer takes [C] or [1, C]")
    if case_change_action not in ("NONE", "LOWER", "UPPER"):
        raise OnnxImportError(f"{node.label}: case_change_action {case_change_action!r} is not NONE, LOWER or UPPER")
    if (locale or "").split("_")[0].split(".")[0].lower() in _LOCALE_RULES:
        raise OnnxImportError(f"{node.label}: locale {locale!r} has case rules of its own; luminal applies Unicode's "
                              "default (simple, per character) case mapping only")
    change = {"NONE": lambda s: s, "LOWER": lower, "UPPER": upper}[case_change_action]
    if is_case_sensitive:
        stops, key = set(stopwords or ()), (lambda s: s)
    else:
        key = upper if case_change_action == "UPPER" else lower
        stops = {key(w) for w in stopwords or ()}
    kept = [change(s) for s in x.reshape(-1) if key(s) not in stops]
    out = np.empty(len(kept) or 1, object)
    out[:] = kept or [""]
    return [out.reshape(1, -1) if x.ndim == 2 else out]


@host_op("StringConcat")
def string_concat(node, x, y):
    return [_map(str.__add__, strings(node, x), strings(node, y, "input 1"))]


@host_op("RegexFullMatch")
def regex_full_match(node, x, pattern=None):
    if pattern is None:
        raise OnnxImportError(f"{node.label}: the pattern attribute is required")
    regex = node.cache("regex", lambda: re2.compile_re2(pattern, node.label))
    return [_map(lambda s: regex.fullmatch(s) is not None, strings(node, x), otype=np.bool_)]


def _split(s: str, delimiter: str, maxsplit: int | None) -> list[str]:
    """onnxruntime's StringSplit of one string: an empty string has no substrings; with no
    delimiter, runs of spaces (' ' only: onnxruntime's rule; the spec says "whitespace") separate,
    and the unsplit rest after `maxsplit` splits has its surrounding spaces removed."""
    if not s:
        return []
    if delimiter:
        return s.split(delimiter, -1 if maxsplit is None else maxsplit)
    parts, rest = [], s.strip(" ")
    while rest and (maxsplit is None or len(parts) < maxsplit):
        head, _, rest = rest.partition(" ")
        parts.append(head)
        rest = rest.lstrip(" ")
    return parts + ([rest] if rest else [])


@host_op("StringSplit")
def string_split(node, x, delimiter="", maxsplit=None):
    x = strings(node, x)
    if maxsplit is not None and maxsplit < 0:
        maxsplit = None
    pieces = [_split(s, delimiter or "", maxsplit) for s in x.reshape(-1)]
    width = max((len(p) for p in pieces), default=0)
    out = np.full((len(pieces), width), "", object)
    for i, p in enumerate(pieces):
        out[i, :len(p)] = p
    return [out.reshape(*x.shape, width), np.array([len(p) for p in pieces], np.int64).reshape(x.shape)]


@host_op("Equal")
def equal(node, a, b):
    return [_map(str.__eq__, strings(node, a), strings(node, b, "input 1"), otype=np.bool_)]


# --- Cast from and to strings -------------------------------------------------------------------
_SPECIAL = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _parse_float(node, s: str) -> float:
    t = s.strip()
    if t.lower() in _SPECIAL:
        return _SPECIAL[t.lower()]
    try:
        return float(t)
    except ValueError:
        pass
    try:
        return float.fromhex(t)
    except ValueError:  # the spec leaves it undefined; onnxruntime reads a prefix or fails
        raise OnnxError(f"{node.label}: {s!r} is not a number") from None


def _parse_int(node, s: str) -> int:
    try:
        return int(s.strip(), 0) if s.strip().lower().startswith(("0x", "-0x")) else int(s.strip())
    except ValueError:  # "2.5" to an integer is undefined in the spec
        raise OnnxError(f"{node.label}: {s!r} is not an integer") from None


def _format(v) -> str:
    """onnxruntime's spelling of a number as a string: %.8g, INF / -INF / NaN."""
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    return f"{v:.8g}"


def cast_from_string(node, x: np.ndarray, to: int) -> np.ndarray:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(to)
    x = strings(node, x)
    flat = x.reshape(-1)
    if dtype.kind == "f" or "float" in dtype.name:  # ml_dtypes' (bfloat16, float8) too
        vals = np.array([_parse_float(node, s) for s in flat], np.float64)
        return vals.astype(dtype).reshape(x.shape)
    if dtype.kind == "b":
        return np.array([_parse_int(node, s) != 0 for s in flat], np.bool_).reshape(x.shape)
    bits = dtype.itemsize * 8
    vals = [_parse_int(node, s) % (1 << bits) for s in flat]  # two's complement wrap, as integer casts
    if dtype.kind == "i":
        vals = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in vals]
    return np.array(vals, dtype).reshape(x.shape)


@host_op("Cast")
def cast(node, x, to, saturate=1, round_mode="up"):
    if to == TP.STRING:
        x = np.asarray(x)
        if x.dtype == object:
            return [strings(node, x)]
        if x.dtype.kind not in "biuf" and "float" not in x.dtype.name:
            raise OnnxError(f"{node.label}: a {x.dtype} tensor cannot be cast to strings")
        vals = x.astype(np.float32) if x.dtype.kind not in "biuf" else x  # float8 / bfloat16: their values
        return [_map(_format, vals)]
    return [cast_from_string(node, x, to)]


@host_op("CastLike")
def cast_like(node, x, like, saturate=1, round_mode="up"):
    to = TP.STRING if np.asarray(like).dtype == object else onnx.helper.np_dtype_to_tensor_dtype(np.asarray(like).dtype)
    return cast(node, x, to)


# --- ai.onnx.ml --------------------------------------------------------------------------------
def _lookup(node, x: np.ndarray, keys, values: np.ndarray, default) -> np.ndarray:
    """Each element of x mapped through keys -> values (the first of equal keys; a NaN key
    matches NaN), else `default`; the result has the values' dtype."""
    x = np.asarray(x)
    string_keys = isinstance(keys[0], str) if len(keys) else x.dtype == object
    if string_keys:
        x = strings(node, x)
    elif x.dtype == object:
        raise OnnxError(f"{node.label}: input 0 is a string tensor, but the keys are numbers")
    table: dict = {}
    nan_value = None
    for k, v in zip(keys, values.reshape(-1).tolist()):
        if not string_keys and math.isnan(float(k)):
            nan_value = v if nan_value is None else nan_value
        else:
            table.setdefault(k if string_keys else (float(k) if x.dtype.kind == "f" else int(k)), v)

    flat = x.reshape(-1).tolist()
    if not string_keys and x.dtype.kind == "f":
        nan = default if nan_value is None else nan_value
        found = [nan if math.isnan(v) else table.get(v, default) for v in flat]
    else:
        found = [table.get(v, default) for v in flat]
    out = np.empty(len(found), values.dtype)
    out[:] = found
    return out.reshape(x.shape)


def _tensor_attr(t):
    return None if t is None else (t if isinstance(t, np.ndarray) else initializer_array(t))


@host_op("LabelEncoder", ML)
def label_encoder(node, x, *, keys_floats=None, keys_int64s=None, keys_strings=None, values_floats=None,
                  values_int64s=None, values_strings=None, default_float=-0.0, default_int64=-1,
                  default_string="_Unused", keys_tensor=None, values_tensor=None, default_tensor=None,
                  classes_strings=None):
    """ai.onnx.ml LabelEncoder, every opset: 1 (classes_strings: string <-> its index), 2 and 4
    (keys -> values, the defaults per value type: -1, -0.0, "_Unused")."""
    if node.opset < 2:
        classes = list(classes_strings or [])
        xs = np.asarray(x)
        if xs.dtype == object or xs.dtype.kind in "US":
            index = {}
            for i, c in enumerate(classes):
                index.setdefault(c, i)
            return [_map(lambda s: index.get(s, int(default_int64)), strings(node, xs), otype=np.int64)]
        return [_map(lambda i: classes[i] if 0 <= i < len(classes) else default_string, xs.astype(np.int64))]
    keys_tensor, values_tensor, default_tensor = map(_tensor_attr, (keys_tensor, values_tensor, default_tensor))
    keys = next((list(np.asarray(k).reshape(-1).tolist()) for k in (keys_tensor, keys_strings, keys_int64s, keys_floats)
                 if k is not None), None)
    if values_tensor is not None:
        values = values_tensor.reshape(-1)
        if values.dtype == object:
            values = strings(node, values, "values_tensor")
        default = (default_tensor.reshape(-1)[0] if default_tensor is not None else
                   "_Unused" if values.dtype == object else -0.0 if values.dtype.kind == "f" else -1)
    elif values_strings is not None:
        values, default = np.array(list(values_strings) + [None], object)[:-1], default_string
    elif values_int64s is not None:
        values, default = np.asarray(values_int64s, np.int64), default_int64
    elif values_floats is not None:
        values, default = np.asarray(values_floats, np.float32), default_float
    else:
        values = default = None
    if keys is None or values is None or len(keys) != values.size:
        raise OnnxImportError(f"{node.label}: it needs as many keys as values (keys_* and values_*)")
    if keys and isinstance(keys[0], bytes):
        keys = [k.decode("utf-8") for k in keys]
    return [_lookup(node, x, keys, values, default)]


@host_op("CategoryMapper", ML)
def category_mapper(node, x, *, cats_int64s=None, cats_strings=None, default_int64=-1, default_string="_Unused"):
    ints, strs = list(cats_int64s or []), list(cats_strings or [])
    if len(ints) != len(strs):
        raise OnnxImportError(f"{node.label}: cats_int64s and cats_strings differ in length")
    xs = np.asarray(x)
    if xs.dtype == object or xs.dtype.kind in "US":
        return [_lookup(node, xs, strs, np.asarray(ints, np.int64), int(default_int64))]
    return [_lookup(node, xs, ints, np.array(strs + [None], object)[:-1], default_string)]


@host_op("ArrayFeatureExtractor", ML)
def array_feature_extractor(node, x, indices):
    """x[..., indices.ravel()] on strings (k-NN's training labels); a 1-D x gives one row, as
    onnxruntime (and the numeric lowering, `ops_ml.py`)."""
    xs = np.asarray(x)
    xs = xs.reshape(1, -1) if xs.ndim == 1 else xs
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise OnnxError(f"{node.label}: input 1 is a {idx.dtype} tensor; it takes int64 indices")
    idx = idx.reshape(-1).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= xs.shape[-1]):
        raise OnnxError(f"{node.label}: an index in {idx.tolist()} is outside [0, {xs.shape[-1]})")
    return [xs[..., idx]]


@host_op("TfIdfVectorizer")
def tfidf_vectorizer(node, x, *, mode, min_gram_length, max_gram_length, max_skip_count, ngram_counts, ngram_indexes,
                     pool_int64s=None, pool_strings=None, weights=None):
    """Counts of the pool's n-grams (min..max_gram_length items, consecutive or `skip` apart for
    each skip in 0..max_skip_count; unigrams counted once) per row of x ([C] or [N, C]), then TF,
    IDF (weight or 1 where present) or TFIDF (weight * count), as onnxruntime's kernel. (onnx's
    reference reads weights by output column, not by pool n-gram as the spec says.)"""
    x = np.asarray(x)
    pool = list(pool_strings) if pool_strings is not None else pool_int64s
    if pool is None or (pool_strings is not None and pool_int64s is not None):
        raise OnnxImportError(f"{node.label}: exactly one of pool_int64s and pool_strings is needed")
    if pool_strings is not None:
        x = strings(node, x)
    elif x.dtype == object or x.dtype.kind not in "iu":
        raise OnnxError(f"{node.label}: input 0 is a {x.dtype} tensor; with pool_int64s it takes int32 or int64")
    if x.ndim > 2:
        raise OnnxError(f"{node.label}: the input has shape {x.shape}; TfIdfVectorizer takes [C] or [N, C]")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise OnnxImportError(f"{node.label}: mode {mode!r} is not TF, IDF or TFIDF")
    grams = node.cache("grams", lambda: _tfidf_table(node, pool, ngram_counts, ngram_indexes, min_gram_length,
                                                     max_gram_length))
    size = max(ngram_indexes) + 1
    rows = x.reshape(1, -1) if x.ndim < 2 else x
    counts = np.zeros((rows.shape[0], size), np.float64)
    for r, row in enumerate(rows.tolist()):
        n_items = len(row)
        for skip in range(max_skip_count + 1):
            step = skip + 1
            lo = max(min_gram_length, 1 if skip == 0 else 2)  # unigrams are not affected by the skip
            for start in range(n_items):
                for n in range(lo, max_gram_length + 1):
                    end = start + step * (n - 1)
                    if end >= n_items:
                        break
                    out = grams.get(tuple(row[start:end + 1:step]))
                    if out is not None:
                        counts[r, out] += 1
    w = None
    if weights:  # the weight of the i-th n-gram of the pool (the spec; onnxruntime), at its output column
        w = np.zeros(size, np.float64)
        w[np.asarray(ngram_indexes[:len(weights)])] = weights[:len(ngram_indexes)]
    if mode == "IDF":
        y = np.where(counts > 0, w[None, :], 0.0) if w is not None else (counts > 0).astype(np.float64)
    elif mode == "TFIDF" and w is not None:
        y = counts * w[None, :]
    else:
        y = counts
    y = y.astype(np.float32)
    return [y.reshape(size) if x.ndim < 2 else y]


def _tfidf_table(node, pool, ngram_counts, ngram_indexes, lo, hi) -> dict:
    """n-gram (a tuple) -> output column, for the pool's n-grams of lo..hi items."""
    if not 1 <= lo <= hi:
        raise OnnxImportError(f"{node.label}: min_gram_length {lo} and max_gram_length {hi} must satisfy 1 <= min <= max")
    table, gram_id = {}, 0
    bounds = list(ngram_counts) + [len(pool)]
    for n, (begin, end) in enumerate(zip(bounds, bounds[1:]), start=1):
        if (end - begin) % n:
            raise OnnxImportError(f"{node.label}: the pool's {n}-grams take {end - begin} items, not a multiple of {n}")
        for j in range(begin, end, n):
            if lo <= n <= hi:
                if gram_id >= len(ngram_indexes):
                    raise OnnxImportError(f"{node.label}: ngram_indexes has fewer entries than the pool has n-grams")
                table[tuple(pool[j:j + n])] = ngram_indexes[gram_id]
            gram_id += 1
    return table

"""Every value the Iterations view takes from a store goes through one of these on its way into
a page: ``esc`` for text and attribute values (every attribute value is double-quoted),
``int_text``/``float_text``/``num_text``/``size_text`` for numbers, ``css_name`` for a fragment of
a CSS class name. A value that should be a number but is not is shown as it is, escaped."""

from __future__ import annotations

import math
import re
from html import escape
from typing import Any


def esc(value: Any) -> str:
    """Any value as text, escaped for an element's text or a double-quoted attribute value."""
    return escape("" if value is None else str(value), quote=True)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_text(value: Any) -> str:
    """An integer (epoch, id, count); anything else shown as it is, escaped."""
    if value is None:
        return ""
    return str(value) if is_int(value) else esc(value)


def float_text(value: Any) -> str:
    """A metric value exactly (its ``repr``, for a data attribute or a title)."""
    if value is None:
        return ""
    return repr(float(value)) if is_number(value) else esc(value)


def num_text(value: Any) -> str:
    """A metric value to 4 significant digits."""
    if value is None:
        return ""
    if not is_number(value):
        return esc(value)
    return f"{value:.4g}" if 1e-3 <= abs(value) < 1e5 or value == 0 or not math.isfinite(value) else f"{value:.3e}"


def size_text(n: Any) -> str:
    if n is None:
        return ""
    if not is_number(n):
        return esc(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return esc(n)


def css_name(value: Any) -> str:
    """A fragment of a CSS class name: letters, digits, '_' and '-' (others become '-')."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", "" if value is None else str(value))

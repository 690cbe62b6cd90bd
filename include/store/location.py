"""``Location``: a place a job reads or writes, in one canonical form.

Every input, checkpoint root and output a run names becomes a ``Location`` once, at the door
(``Location.parse``), and the data plane only opens that form. The grammar is an allow-list,
so that no reader downstream (Hadoop's ``Path`` and ``globStatus``, Spark's file index, the S3A
connector, a store listing, delta-rs) can give a character a meaning of its own:

* a local location is an absolute path (or a ``file:///`` URL), whose symbolic links are
  resolved; an S3 location is ``s3://bucket/key`` (``s3a://`` is the same place, spelled by
  Hadoop), with a bucket named as S3 names buckets;
* every segment of the path or key is made of ``A-Z a-z 0-9 . _ - =`` only, is not ``.`` or
  ``..``, and no segment is empty;
* everything else is refused with a message that names the character and why: Hadoop glob and
  list syntax (``* ? [ ] { } \\ ,``), URI syntax (``% # : @``), white space, quotes, shell and
  control characters, and any non-ASCII character (two spellings of one name).

The canonical form is what ``str(location)`` and ``location.url`` give: ``/resolved/path`` or
``s3://bucket/key``. Two locations are the same place exactly when their canonical forms are
equal; ``contains`` and ``overlaps`` compare segment by segment (``s3://b/ckpt`` neither
contains nor overlaps ``s3://b/ckpt2``).

Nothing here imports Spark or Airflow.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from include.errors import ConfigError

#: the characters a segment may hold
SEGMENT_CHARS = "A-Z a-z 0-9 . _ - ="
_SEGMENT = re.compile(r"[A-Za-z0-9._=\-]+")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_MAX_SEGMENT = 255
_MAX_LENGTH = 1024
#: why a character is refused, for the message (others: "not in the allowed set")
_WHY = {
    **{c: "Hadoop expands it as a glob pattern" for c in "*?[]{}"},
    "\\": "Hadoop's glob syntax takes it as an escape",
    ",": "Hadoop and Spark read it as a list of paths",
    "%": "URI readers decode it as an escape",
    "#": "URI readers take what follows as a fragment",
    ":": "Hadoop reads what comes before it as a scheme",
    "@": "URI readers take what comes before it as a user",
    "~": "shells and some readers expand it to a home directory",
    "$": "shells and some readers expand it as a variable",
    " ": "readers split or escape white space",
    "'": "quotes are read differently by every layer",
    '"': "quotes are read differently by every layer",
    "`": "shells run what it encloses",
    ";": "shells read it as a command separator",
    "|": "shells read it as a pipe",
    "&": "shells read it as a command separator",
    "<": "shells read it as a redirection",
    ">": "shells read it as a redirection",
    "+": "URL decoders read it as a space",
    "!": "Hadoop's glob syntax negates with it",
    "^": "Hadoop's glob syntax negates with it",
}


class LocationError(ConfigError):
    """A location that is not in the grammar, or that lies where it may not."""


def _describe(ch: str) -> str:
    if ch == " ":
        return "' ' (a space)"
    if ch in "\t\n\r\x0b\x0c" or ord(ch) < 0x20 or ord(ch) == 0x7f:
        return f"{ch!r} (a control character)"
    if ord(ch) > 0x7e:
        return f"{ch!r} (U+{ord(ch):04X}, not ASCII: one name could be spelled two ways)"
    return repr(ch)


def _check_segments(text: str, what: str, segments: list[str]) -> None:
    for segment in segments:
        if segment in ("", ".", ".."):
            shown = "an empty segment" if not segment else f"a {segment!r} segment"
            raise LocationError(f"{what} {text!r} has {shown}: a location names every directory plainly, "
                                "without '.', '..' or '//'")
        if len(segment) > _MAX_SEGMENT:
            raise LocationError(f"{what} {text!r}: the segment {segment[:40]!r}... is longer than "
                                f"{_MAX_SEGMENT} characters")
        if not _SEGMENT.fullmatch(segment):
            bad = next(c for c in segment if not _SEGMENT.fullmatch(c))
            why = _WHY.get(bad, "it is not in the allowed set")
            raise LocationError(f"{what} {text!r} contains the character {_describe(bad)}, which a location may "
                                f"not hold ({why}); a segment is made of {SEGMENT_CHARS} only")


@dataclass(frozen=True, order=True)
class Location:
    """A canonical place: ``scheme`` "file" (``bucket`` empty, ``path`` absolute and resolved)
    or "s3" (``bucket``, ``path`` the key without leading or trailing '/', "" for the bucket)."""

    scheme: str
    bucket: str
    path: str

    # --- making one ----------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: object, what: str = "location", *, resolve: bool = True) -> "Location":
        """The canonical location ``text`` names; LocationError naming ``what``, the value and
        the offending character or part otherwise. ``resolve``: resolve a local path's
        symbolic links (off only for paths of another machine, such as a deployment's roots
        checked where they do not exist)."""
        if isinstance(text, Location):
            return text
        if isinstance(text, os.PathLike):
            text = os.fspath(text)
        if not isinstance(text, str) or not text.strip():
            raise LocationError(f"{what} must be a non-empty string, got {text!r}")
        if len(text) > _MAX_LENGTH:
            raise LocationError(f"{what} is longer than {_MAX_LENGTH} characters ({len(text)})")
        if text != text.strip():
            raise LocationError(f"{what} {text!r} starts or ends with white space")
        lowered = text[:6].lower()
        if lowered.startswith(("s3://", "s3a://")):
            return cls._parse_s3(text, what)
        if lowered.startswith("file:"):
            parts = urlsplit(text)
            if not text.startswith("file:///") or parts.netloc or parts.query or parts.fragment:
                raise LocationError(f"{what} {text!r}: a file URL is file:///absolute/path, without host, "
                                    "query or fragment")
            text_path = text[len("file://"):]
        elif text.startswith("-"):
            raise LocationError(f"{what} {text!r} looks like a command-line option, not a location")
        elif re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:", text):
            raise LocationError(f"{what} {text!r}: only absolute local paths, file:/// and s3:// URLs are "
                                "accepted")
        elif not text.startswith("/"):
            raise LocationError(f"{what} {text!r} must be an absolute path (or s3://bucket/key)")
        else:
            text_path = text
        return cls._parse_local(text, text_path, what, resolve)

    @classmethod
    def _parse_local(cls, text: str, path: str, what: str, resolve: bool) -> "Location":
        raw = path.rstrip("/") or "/"
        segments = raw.split("/")[1:] if raw != "/" else []
        _check_segments(text, what, segments)
        if not resolve:
            return cls("file", "", raw)
        resolved = os.path.realpath(raw)
        if resolved != raw:  # a link on the way: its target must be in the grammar too
            target = resolved.split("/")[1:] if resolved != "/" else []
            _check_segments(resolved, f"{what} {text!r} resolves to", target)
        return cls("file", "", resolved)

    @classmethod
    def _parse_s3(cls, text: str, what: str) -> "Location":
        scheme_end = text.index("://") + 3
        rest = text[scheme_end:]
        bucket, _, key = rest.partition("/")
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            bad = next((c for c in bucket if not re.fullmatch(r"[a-z0-9.\-]", c)), None)
            detail = (f"the character {_describe(bad)}" if bad else f"{len(bucket)} characters"
                      if not 3 <= len(bucket) <= 63 else "'..' or a first or last character that is not a letter or digit")
            raise LocationError(f"{what} {text!r}: {bucket!r} is not an S3 bucket name ({detail}; a bucket is "
                                "3-63 characters of a-z 0-9 . -, starting and ending with a letter or digit)")
        key = key[:-1] if key.endswith("/") else key
        if key:
            _check_segments(text, what, key.split("/"))
        return cls("s3", bucket, key)

    # --- what it is ----------------------------------------------------------------------------

    @property
    def is_s3(self) -> bool:
        return self.scheme == "s3"

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    @property
    def url(self) -> str:
        """The canonical form: ``/path`` or ``s3://bucket/key`` (``s3://bucket`` for a bucket)."""
        if self.is_s3:
            return f"s3://{self.bucket}/{self.path}" if self.path else f"s3://{self.bucket}"
        return self.path

    def __str__(self) -> str:
        return self.url

    def hadoop_path(self) -> str:
        """The form Hadoop and Spark open: ``file:///path`` or ``s3a://bucket/key``. Safe to hand
        to them as it is: the grammar leaves them nothing to expand."""
        return f"s3a://{self.bucket}/{self.path}" if self.is_s3 else f"file://{self.path}"

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(s for s in self.path.split("/") if s)

    @property
    def name(self) -> str:
        return self.segments[-1] if self.segments else ""

    def child(self, *names: str) -> "Location":
        """The location under this one, ``names`` checked by the grammar."""
        parts = [p for n in names for p in str(n).split("/")]
        _check_segments("/".join(parts), "a location's child", parts)
        path = "/".join([*self.segments, *parts])
        return Location(self.scheme, self.bucket, path if self.is_s3 else "/" + path)

    @property
    def parent(self) -> "Location":
        segs = self.segments[:-1]
        return Location(self.scheme, self.bucket, "/".join(segs) if self.is_s3 else "/" + "/".join(segs))

    def ancestors(self) -> list["Location"]:
        """This location's parents, nearest first, up to the root or the bucket."""
        out, here = [], self
        while here.segments:
            here = here.parent
            out.append(here)
        return out

    # --- comparing -----------------------------------------------------------------------------

    def contains(self, other: "Location") -> bool:
        """Whether ``other`` is this location or lies under it (segment by segment)."""
        if (self.scheme, self.bucket) != (other.scheme, other.bucket):
            return False
        mine = self.segments
        return other.segments[:len(mine)] == mine

    def overlaps(self, other: "Location") -> bool:
        """Whether the two are the same place or one lies inside the other."""
        return self.contains(other) or other.contains(self)

    def relative_to(self, root: "Location") -> str:
        """The '/'-separated part of this location under ``root`` ("" for the root itself)."""
        if not root.contains(self):
            raise LocationError(f"{self} does not lie under {root}")
        return "/".join(self.segments[len(root.segments):])


def parse_location(text: object, what: str = "location") -> Location:
    """``Location.parse``: the one door every run-supplied place goes through."""
    return Location.parse(text, what)


__all__ = ["Location", "LocationError", "SEGMENT_CHARS", "parse_location"]

"""Secrets that URLs carry, found and hidden: the one place that knows their shapes.

A URL can hold a secret in its user-info (`s3://KEY:SECRET@bucket/...`, Hadoop's spelling, and
`https://TOKEN@host/...`) or in its query (presigned S3 and GCS signatures, Azure SAS tokens,
`key=`, `token=`). Nothing shardfeed writes or prints may hold one: every file it writes about a
dataset or run, every CLI line, every ShardfeedError's message passes through `redact`.

AWS secret keys hold '/' and '+', and secrets in general may hold '@' or '%'-escapes, so the
user-info is not "up to the first '/'": it runs to the last '@' of the URL that is still part of
the authority (`_userinfo_end`). Redaction errs on the side of hiding too much.
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import unquote

# scheme:// and the rest of the URL up to whitespace or a quote; `_userinfo_end` finds its user-info
_URL = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<rest>[^\s'\"<>]+)")
_QUERY_NAMES = (
    r"[a-z0-9_.-]*(?:sig|signature|token|key|secret|password|passwd|pwd|credential|auth)[a-z0-9_.-]*"
    r"|sv|se|sp|st|sr|spr|skoid|sktid|sks|skv|skt|ske|x-amz-[a-z0-9-]+|x-goog-[a-z0-9-]+"
)
_SECRET_QUERY = re.compile(rf"(?P<key>[?&;](?:{_QUERY_NAMES})=)[^&\s'\"#<>]*", re.IGNORECASE)
# s3://KEY:SECRET@bucket/...: the key has no ':', '/' or '@'; the secret runs to the '@' before the
# bucket (bucket names are lowercase letters, digits, '.' and '-').
S3_USERINFO = re.compile(r"^(?P<scheme>s3a?)://(?P<key>[^/:@]+):(?P<secret>.+?)@(?=[a-z0-9][a-z0-9.-]*(?:/|$))")


def _userinfo_end(rest: str) -> int:
    """Where the user-info of a URL's remainder `rest` (after 'scheme://') ends: the index of its
    '@', or -1 when it has none. That is the last '@' such that what precedes it holds a ':'
    before any '/' (key:secret, even with '/' inside the secret) or no '/' at all (a bare token),
    so a secret holding '@' is hidden whole."""
    at = rest.rfind("@")
    while at > 0:
        head = rest[:at]
        slash = head.find("/")
        if slash < 0 or ":" in head[:slash]:
            return at
        at = rest.rfind("@", 0, at)
    return -1


def _hide_userinfo(match: re.Match[str]) -> str:
    rest = match["rest"]
    end = _userinfo_end(rest)
    return match["scheme"] + (f"***{rest[end:]}" if end > 0 else rest)


def _drop_userinfo(match: re.Match[str]) -> str:
    rest = match["rest"]
    end = _userinfo_end(rest)
    return match["scheme"] + (rest[end + 1 :] if end > 0 else rest)


def redact(text: str) -> str:
    """`text` with every secret a URL in it carries replaced by '***' (see the module docstring)."""
    if "://" not in text and "=" not in text:
        return text
    text = _URL.sub(_hide_userinfo, text)
    return _SECRET_QUERY.sub(r"\g<key>***", text)


def without_userinfo(text: str) -> str:
    """`text` with the user-info of every URL in it left out (`s3://KEY:SECRET@bucket/x` ->
    `s3://bucket/x`, and `s3://***@bucket/x` likewise) and secret query values hidden: a URL
    that still works where the credentials come from the environment, for files that are read
    back as paths (a run's run.json names its data so)."""
    if "://" not in text and "=" not in text:
        return text
    text = _URL.sub(_drop_userinfo, text)
    return _SECRET_QUERY.sub(r"\g<key>***", text)


class Credentials(NamedTuple):
    """What `s3://KEY:SECRET@bucket/...` carries: the URL without them, the key and secret with
    their %-escapes decoded (`%2F` for '/', `%40` for '@'), and the user-info as written."""

    url: str
    key: str
    secret: str
    userinfo: str  # 'KEY:SECRET@'


def s3_credentials(url: str) -> Credentials | None:
    """The credentials `url` carries (see `Credentials`), or None."""
    found = S3_USERINFO.match(url)
    if not found:
        return None
    userinfo = url[len(found["scheme"]) + 3 : found.end()]
    return Credentials(
        f"{found['scheme']}://{url[found.end() :]}", unquote(found["key"]), unquote(found["secret"]), userinfo
    )

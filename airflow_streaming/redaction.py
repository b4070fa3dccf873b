"""Secrets: which keys are sensitive, and masking them out of any text. The one place for both.

Plain Python, no Airflow import: the driver side (``spark_jobs/runtime``) uses it too.

- Spark conf is **private by default**: :func:`is_secret_conf_entry` - an entry is public only when its
  key is a known non-secret Spark setting (:func:`airflow_streaming.public_conf.is_public_conf_key`)
  and its value holds no secret. :func:`split_conf`, :func:`secret_values`, :func:`mask_conf` and
  :func:`mask_spec` use it: private conf travels in a 0600 properties file (or the cluster target's
  secret channel), never on a command line, and is masked in specs at rest, the UI and logs.
- :func:`is_sensitive_key` (by key name), :func:`holds_secret` (by value: the same patterns as the log
  redaction), :func:`is_secret_entry` (either): for what is no Spark conf - job arguments
  (:func:`secret_arguments`), environment variables, ``key=value`` pairs in any text.
- :func:`remember_secrets` keeps secret *values* in a process-local registry; every later
  :func:`redact` masks them. :func:`airflow_streaming.log_masking.register_secrets` (Airflow
  side) also hands them to Airflow's own secrets masker, so Airflow masks them in task logs too.
- :func:`redact_text` masks known values plus what a pattern can recognise: ``key=value`` /
  ``key: value`` pairs (JSON and query strings too) with a sensitive key, ``--password x`` style
  arguments, URL userinfo, ``Authorization`` values, ``Bearer`` tokens and PEM private key blocks.
- :func:`redact` is :func:`redact_text` for strings, dicts and lists, plus Airflow's masker when
  Airflow's masker is already loaded in this process (Airflow's masker only knows values registered
  in this process, which loads it: so when it is not loaded there is nothing it could add, and
  Airflow is never imported just to redact - the driver side must not import it).
- :class:`RedactingFormatter` redacts whole log records, tracebacks included (the driver's log).
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_streaming.exceptions import SpecError
from airflow_streaming.public_conf import is_public_conf_key

MASK = "***"
#: Values shorter than this are never masked as literals (they would mask innocent text everywhere).
MIN_SECRET_LENGTH = 3
#: Values under a sensitive key that are no secret: ``spark.security.credentials.hive.enabled=false``.
_NOT_SECRET_VALUES = frozenset({"true", "false", "none", "null", "yes", "no", "on", "off"})

# ------------------------------------------------------------------------------------- sensitive keys

#: A key naming a secret contains one of these (any case).
SENSITIVE_WORDS = ("password", "passwd", "pwd", "passphrase", "secret", "token", "credential", "apikey", "api_key",
                   "api-key", "private", "accountkey", "webhook")
#: Short words that name a secret when they are a whole segment of a key (``DB_PASS``, ``spark.redis.auth``,
#: ``--pass``, ``GITHUB_PAT``, ``sig=``): inside a word they mean something else (``passenger``, ``path``).
SENSITIVE_SEGMENTS = ("pass", "auth", "pat", "pw", "sas", "sig", "jaas")
_SEGMENT_RE = r"(?:^|(?<=[._\-]))(?:" + "|".join(SENSITIVE_SEGMENTS) + r")(?=$|[._\-])"
_SENSITIVE_KEY_RE = re.compile(
    r"(?:" + "|".join(re.escape(w) for w in SENSITIVE_WORDS) + r")" + r"|" + _SEGMENT_RE +
    r"|(?:^|\.)(?:key|keystore|truststore\.password)$"
    r"|^fs\.azure\.account\.key\.|\.account\.key\.|^spark\.hadoop\.fs\.azure\.account\.key\.",
    re.IGNORECASE)
_SENSITIVE_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def is_sensitive_key(key: str) -> bool:
    """Whether a conf key (or any ``key=value`` key) names a secret: ``*password*``, ``*pwd*``,
    ``*secret*`` (``fs.s3a.secret.key``), ``*token*``, ``*credential*``, ``*apikey*``, ``*private*``
    (``private_key``), a key ending in ``.key`` (``fs.s3a.access.key``), ``fs.azure.account.key.*`` and a
    key with a segment ``pass``, ``auth``, ``pat``, ``pw``, ``sas``, ``sig`` or ``jaas`` (``DB_PASS``)."""
    return bool(_SENSITIVE_KEY_RE.search(key))


def is_sensitive_header(name: str) -> bool:
    """Whether an HTTP header carries a credential: ``Authorization``, ``Proxy-Authorization``,
    ``Cookie`` or any header with a sensitive name (``X-Api-Key``, ``X-Auth-Token``...)."""
    return name.strip().lower() in _SENSITIVE_HEADERS or is_sensitive_key(name)


def holds_secret(value: Any) -> bool:
    """Whether a *value* carries a secret whatever its key: a JAAS config or any ``password=`` /
    ``secret: x`` pair inside it, a URL or JDBC string with userinfo or ``password=``, a PEM private
    key, a bearer token or ``Authorization`` value, a ``--password x`` option, or a value this process
    already knows as a secret. The same patterns as the log redaction (:func:`redact_text`): a value
    holds a secret exactly when the redaction would change it."""
    if not isinstance(value, str) or not value:
        return False
    return redact_text(value) != value


def is_secret_entry(key: Any, value: Any) -> bool:
    """Whether a ``key=value`` entry (Spark conf, a spec field) is a secret: by its key
    (:func:`is_sensitive_key`) or by its value (:func:`holds_secret`)."""
    return is_sensitive_key(str(key)) or holds_secret(value if isinstance(value, str) else str(value))


def is_secret_conf_entry(key: Any, value: Any) -> bool:
    """Whether a Spark conf entry is private (the rule is inverted: private unless known public): its key
    is not a known non-secret Spark setting (:func:`~airflow_streaming.public_conf.is_public_conf_key`),
    or its value holds a secret (:func:`holds_secret`)."""
    return not is_public_conf_key(str(key)) or holds_secret(value if isinstance(value, str) else str(value))


def split_conf(conf: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(plain, secret)``: the Spark conf without and with its private entries (see
    :func:`is_secret_conf_entry`). Private entries never go on a command line."""
    plain = {k: v for k, v in conf.items() if not is_secret_conf_entry(k, v)}
    return plain, {k: v for k, v in conf.items() if k not in plain}


def split_entries(entries: Mapping[str, Any], names: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(plain, secret)`` of conf ``entries`` that carry named values (``names``: conf key -> the name it
    carries, e.g. an environment variable's): secret when the carried name or the value holds one
    (:func:`is_secret_entry`) - for conf the provider builds from a spec field (``env_vars``)."""
    plain = {k: v for k, v in entries.items() if not is_secret_entry(names.get(k, k), v)}
    return plain, {k: v for k, v in entries.items() if k not in plain}


def mask_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A Spark conf as it may be shown or stored: every private entry's value (see
    :func:`is_secret_conf_entry`) replaced by ``***``."""
    return {k: (MASK if v not in (None, "") and is_secret_conf_entry(k, v) else v) for k, v in conf.items()}


_OPTION_NAME = re.compile(r"--?[\w.\-]+")


def secret_arguments(args: Iterable[Any]) -> list[int]:
    """The indexes of ``args`` that hold a secret: a value after an option that names one
    (``--password x``), an ``--option=value`` pair whose option names one, or any argument whose text
    holds one (a URL with userinfo, ``password=`` inside a JDBC string...)."""
    args = [str(a) for a in args]
    found = []
    for i, arg in enumerate(args):
        option = arg.lstrip("-")
        previous = args[i - 1] if i else ""
        if previous.startswith("-") and "=" not in previous and is_sensitive_key(previous.lstrip("-")) \
                and not arg.startswith("-"):
            found.append(i)
        elif arg.startswith("-") and "=" in arg and is_sensitive_key(option.split("=", 1)[0]):
            found.append(i)
        elif holds_secret(arg) and not _OPTION_NAME.fullmatch(arg):  # a PEM block starts with "-" too
            found.append(i)
    return found


def mask_args(args: Iterable[Any]) -> list[str]:
    """``args`` with every argument that holds a secret (see :func:`secret_arguments`) masked."""
    args = [str(a) for a in args]
    secret = set(secret_arguments(args))
    out = []
    for i, arg in enumerate(args):
        if i not in secret:
            out.append(arg)
        elif arg.startswith("-") and "=" in arg:
            out.append(f"{arg.split('=', 1)[0]}={MASK}")
        else:
            masked = redact_text(arg)
            out.append(masked if masked != arg else MASK)
    return out


#: Secret arguments of a job (``StreamSpec.secret_args``) travel as secret conf entries under this
#: prefix (``<prefix><NNN>.option`` and ``.value``); the driver's runtime appends them to the job's
#: arguments. Spark's own redaction hides them ("secret" is in the key).
SECRET_ARG_PREFIX = "spark.airflow_streaming.secret_arg."


def secret_args_conf(secret_args: Mapping[str, Any]) -> dict[str, str]:
    """The secret conf entries that carry ``secret_args`` (option -> value), in order."""
    conf: dict[str, str] = {}
    for i, (option, value) in enumerate(secret_args.items()):
        conf[f"{SECRET_ARG_PREFIX}{i:03d}.option"] = str(option)
        conf[f"{SECRET_ARG_PREFIX}{i:03d}.value"] = str(value)
    return conf


def secret_args_of_conf(conf: Mapping[str, Any]) -> list[str]:
    """The job arguments ``[option, value, ...]`` carried by ``conf`` (see :func:`secret_args_conf`)."""
    indexes = sorted({k[len(SECRET_ARG_PREFIX):].split(".", 1)[0] for k in conf if str(k).startswith(SECRET_ARG_PREFIX)})
    out: list[str] = []
    for i in indexes:
        option, value = conf.get(f"{SECRET_ARG_PREFIX}{i}.option"), conf.get(f"{SECRET_ARG_PREFIX}{i}.value")
        if option is not None and value is not None:
            out += [str(option), str(value)]
    return out


#: Spark's own redaction (the UI's Environment page, the event log, ``/api/v1/.../environment``), set on
#: every submission so that it hides what ours hides: a conf entry is redacted when its key OR its value
#: matches (Spark's rule). Keys: our sensitive words, ``auth``, ``pass`` and environment-passing keys
#: (``spark.executorEnv.*``...); values: ``password=``-style pairs (JAAS, JDBC), URL userinfo, ``sig=``,
#: bearer and basic credentials, PEM private keys (also in base64). A regex cannot express the allowlist:
#: a private key named otherwise still shows on the driver's own Spark UI (docs/security.md).
SPARK_REDACTION_REGEX = (
    r"(?i)" + "|".join(re.escape(w) for w in SENSITIVE_WORDS) + r"|access[.]key|account[.]key|jaas|auth|pass|"
    r"env[.]|sig=|basic\s|ls0tls1crudjti|"
    r"[a-z][a-z0-9+.-]*://[^/\s@]+@|bearer\s|-----BEGIN [A-Z ]*PRIVATE KEY")
#: Spark SQL's redaction of strings in plans and SQL UI (``spark.sql.redaction.string.regex``): the
#: secret part of ``password=...`` pairs and URL userinfo.
SPARK_SQL_REDACTION_STRING_REGEX = (
    r"(?i)(?:" + "|".join(re.escape(w) for w in SENSITIVE_WORDS) + r")\s*[=:]\s*[^\s;&,)\]}]+|(?<=://)[^/\s@]+(?=@)")


def _maskable(value: str) -> bool:
    """Worth masking as a literal: long enough, and not a flag or a small number (``3600``)."""
    plain = value.strip().lower()
    return (len(value) >= MIN_SECRET_LENGTH and plain not in _NOT_SECRET_VALUES
            and not (plain.isdigit() and len(plain) < 6))


def secret_values(conf: Mapping[str, Any]) -> list[str]:
    """The values of a Spark conf's private entries (:func:`is_secret_conf_entry`) worth masking as
    literals: not ``true``/``false``, not a number under 6 digits, not shorter than :data:`MIN_SECRET_LENGTH`."""
    return [str(v) for k, v in conf.items() if v is not None and is_secret_conf_entry(k, v) and _maskable(str(v))]


# ------------------------------------------------------------------------------------- known values

_KNOWN: frozenset[str] = frozenset()
_KNOWN_LOCK = threading.Lock()


def remember_secrets(values: Iterable[Any]) -> None:
    """Mask ``values`` in every later :func:`redact` / :func:`redact_text` of this process (no Airflow)."""
    global _KNOWN
    fresh = {str(v) for v in values if v is not None and _maskable(str(v))}
    if fresh - _KNOWN:
        with _KNOWN_LOCK:
            _KNOWN = _KNOWN | fresh


def known_secrets() -> frozenset[str]:
    """The values :func:`remember_secrets` was given in this process."""
    return _KNOWN


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every one of ``secrets`` (3 characters or longer) replaced by ``***``."""
    for secret in sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


# ------------------------------------------------------------------------------------------ patterns

_WORDS = "|".join(re.escape(w) for w in SENSITIVE_WORDS)
_KEY_CHARS = r"[\w.\-]"
# A candidate key: contains a sensitive word, ends in ".key", is "key", or is an Azure account key.
# Every candidate is re-checked with is_sensitive_key, so the two can never disagree.
_SEGMENTS = "|".join(SENSITIVE_SEGMENTS)
_CANDIDATE_KEY = (rf"{_KEY_CHARS}*(?:{_WORDS}){_KEY_CHARS}*"
                  rf"|{_KEY_CHARS}*(?<![A-Za-z0-9])(?:{_SEGMENTS})(?![A-Za-z0-9]){_KEY_CHARS}*"
                  rf"|{_KEY_CHARS}*\.account\.key\.{_KEY_CHARS}*"
                  rf"|(?<![\w.\-]){_KEY_CHARS}*(?<![\w-])key(?![\w.\-])")
# A value: a JSON-escaped quoted string (\"x\", a JAAS config inside JSON), a quoted one, or a bare word.
_VALUE = r"(?P<val>\\\"(?:[^\"\\]|\\[^\"])*\\\"|\"[^\"]*\"|'[^']*'|[^\s,;&|<>\"'}\])]+)"
_KEY_VALUE = re.compile(rf"(?P<key>{_CANDIDATE_KEY})(?P<kq>\\?[\"']?)(?P<sep>[ \t]*[=:][ \t]*){_VALUE}", re.IGNORECASE)
# Any option followed by a value; re-checked with is_sensitive_key (``--password x``, ``--pass x``, ``--auth x``).
_CLI_OPTION = re.compile(rf"(?P<opt>(?<![\w-])--?{_KEY_CHARS}+)(?P<sp>[ \t]+)(?!-)"
                         r"(?P<val>\"[^\"]*\"|'[^']*'|\S+)", re.IGNORECASE)
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^\s/?#@]+(?:@[^\s/?#@]+)*@", re.IGNORECASE)
_BEARER = re.compile(r"\b(?P<scheme>Bearer)\s+[A-Za-z0-9._~+/=-]{4,}", re.IGNORECASE)
_AUTH_HEADER = re.compile(r"(?P<key>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)"
                          r"(?P<scheme>(?:Basic|Bearer|Token|Digest|Negotiate|AWS4-HMAC-SHA256)\s+)?"
                          r"(?P<val>[^\s\"',;]+)", re.IGNORECASE)
_PEM_PRIVATE_KEY = re.compile(r"-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
                              r".*?(?:-----END (?P=label)-----|\Z)", re.DOTALL)
#: A PEM block in base64 (``LS0tLS1CRUdJTi`` is ``-----BEGIN``): masked when it decodes to a private key.
_B64_PEM = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]*")
#: A DER private key in base64 (PKCS#1 ``MIIE..IBAAKC``, PKCS#8 ``MIIE..IBADAN``).
_DER_PRIVATE_KEY = re.compile(r"\bMII[A-Za-z0-9+/]{3}IBA(?:AKC|DAN)[A-Za-z0-9+/=]*")
#: ``Basic <base64 of user:password>`` (whatever the key or header around it).
_BASIC = re.compile(r"\b(?P<scheme>Basic)\s+(?P<val>[A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])", re.IGNORECASE)
#: Oracle-style ``user/password@db`` (``scott/tiger@orcl``, ``jdbc:oracle:thin:scott/tiger@//h:1521/s``).
_SLASH_CREDENTIALS = re.compile(r"(?<![\w/.@\-])(?P<user>[A-Za-z_][\w$#.\-]*)/[^\s/@:'\"]+@(?=[\w.\[/])")
#: Tokens whose shape names them: GitHub, Slack, AWS access key ids, Google API keys, Stripe live keys.
_TOKEN_SHAPES = re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}"
                           r"|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{35}|sk_live_[0-9A-Za-z]{16,})\b")
#: Webhook URLs whose path is the credential (Slack, Discord, Teams).
_WEBHOOK_URL = re.compile(r"(?P<base>https://(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
                          r"|(?:\w+\.)?discord(?:app)?\.com/api/webhooks/|[\w.-]*webhook\.office\.com/))"
                          r"[^\s\"'<>]+", re.IGNORECASE)


def _b64_decoded(text: str) -> bytes:
    """``text`` decoded as base64 (cut to whole 4-character groups: a truncated text decodes too; ``b""`` if it
    is none)."""
    text = text.rstrip("=")
    try:
        return base64.b64decode(text[:len(text) - len(text) % 4], validate=False)
    except (binascii.Error, ValueError):
        return b""


def _basic(m: re.Match[str]) -> str:
    return f"{m.group('scheme')} {MASK}" if b":" in _b64_decoded(m.group("val")) else m.group(0)


def _cli_option(m: re.Match[str]) -> str:
    if not is_sensitive_key(m.group("opt").lstrip("-")):
        return m.group(0)
    return f"{m.group('opt')}{m.group('sp')}{_quoted_mask(m.group('val'))}"


def _quoted_mask(value: str) -> str:
    return f"{value[0]}{MASK}{value[0]}" if value[:1] in ("'", '"') else MASK


def _key_value(m: re.Match[str]) -> str:
    if not is_sensitive_key(m.group("key").lstrip("-")) and not is_sensitive_key(m.group("key")):
        return m.group(0)
    return f"{m.group('key')}{m.group('kq')}{m.group('sep')}{_quoted_mask(m.group('val'))}"


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with secrets masked as ``***`` (pure Python; see the module docstring for what):

    - PEM private key blocks (``-----BEGIN ... PRIVATE KEY-----`` to its END line, or to the end of
      a truncated text); certificates and public keys are left alone;
    - the literal ``secrets`` and every value :func:`remember_secrets` was given;
    - URL userinfo: ``https://user:pass@host`` -> ``https://***@host``;
    - ``Authorization: <scheme> <credentials>``, ``Bearer <token>`` and ``Basic <user:password>``;
    - base64 private keys (a PEM block in base64, a DER key), Oracle-style ``user/password@db``, tokens
      whose shape names them (``ghp_...``, ``xoxb-...``, ``AKIA...``) and webhook URLs (Slack, Discord);
    - ``--password x`` / ``--api-token "x y"`` (the option names a secret; ``--token=x`` is a pair);
    - ``key=value``, ``key: value``, ``"key": "value"`` whose key :func:`is_sensitive_key`
      (``spark.hadoop.fs.s3a.secret.key=...``, ``fs.azure.account.key.acct.dfs.core.windows.net=...``,
      ``-Dspark.ssl.keyPassword=...``, ``?access_token=...``).
    """
    if not text:
        return text
    text = _PEM_PRIVATE_KEY.sub(lambda m: f"-----BEGIN {m.group('label')}-----{MASK}-----END {m.group('label')}-----",
                                text)
    text = _B64_PEM.sub(lambda m: MASK if b"PRIVATE KEY" in _b64_decoded(m.group(0)[:64]) else m.group(0), text)
    text = _DER_PRIVATE_KEY.sub(MASK, text)
    text = scrub(text, (*secrets, *_KNOWN))
    text = _WEBHOOK_URL.sub(lambda m: f"{m.group('base')}{MASK}", text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    text = _SLASH_CREDENTIALS.sub(lambda m: f"{m.group('user')}/{MASK}@", text)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group('key')}{m.group('scheme') or ''}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group('scheme')} {MASK}", text)
    text = _BASIC.sub(_basic, text)
    text = _TOKEN_SHAPES.sub(MASK, text)
    text = _CLI_OPTION.sub(_cli_option, text)
    return _KEY_VALUE.sub(_key_value, text)


# ------------------------------------------------------------------------------------ Airflow's masker

#: The modules of Airflow's secrets masker: the task SDK's (``airflow.sdk.log.mask_secret`` feeds it)
#: and the core's (scheduler, API server). Separate instances, separate registered values.
_AIRFLOW_MASKERS = ("airflow.sdk._shared.secrets_masker", "airflow._shared.secrets_masker")


def _airflow_redact(text: str) -> str:
    """``text`` through every Airflow secrets masker already loaded in this process (never imports one)."""
    for name in _AIRFLOW_MASKERS:
        module = sys.modules.get(name)
        airflow_redact = getattr(module, "redact", None)
        if airflow_redact is None:
            continue
        try:
            masked = airflow_redact(text)
        except Exception:  # noqa: BLE001 - our own patterns still apply
            continue
        if isinstance(masked, str):
            text = masked
    return text


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """``value`` with secrets masked: a string through :func:`redact_text` and Airflow's masker (when
    loaded); a dict's values (every string under a sensitive key is masked whole) and a list's items
    recursively; anything else unchanged."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return _airflow_redact(redact_text(value, secrets)) if value else value
    if isinstance(value, Mapping):
        return {k: _mask_all(v) if is_sensitive_key(str(k)) else redact(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    return value


def _mask_all(value: Any) -> Any:
    """Every string in ``value`` masked (the value sits under a sensitive key); other scalars kept."""
    if isinstance(value, (str, bytes)):
        return MASK if value else value
    if isinstance(value, Mapping):
        return {k: _mask_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask_all(v) for v in value]
    return value


class RedactingFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose output (message, arguments and traceback) went through
    :func:`redact_text`: for the driver's log, where Airflow's masker does not run."""

    def format(self, record: logging.LogRecord) -> str:  # noqa: D102 - logging.Formatter's API
        return redact_text(super().format(record))


# --------------------------------------------------------------------------- specs at rest

def mask_spec(spec: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A spec dict as it may be stored in control files (``deployed.json``, lifecycle records,
    history): the values of private ``spark_conf`` entries (:func:`mask_conf`), secret arguments and
    secret environment variables replaced by ``***``. Control files live on
    shared storage; the secrets stay with whoever owns the spec (the DAG, the desired-state file)."""
    if spec is None:
        return None
    conf = dict(spec.get("spark_conf") or {})
    masked = {**spec, "spark_conf": mask_conf(conf)}
    if spec.get("application_args"):
        masked["application_args"] = mask_args(spec["application_args"])
    if spec.get("secret_args"):
        masked["secret_args"] = {k: MASK for k in spec["secret_args"]}
    if spec.get("env_vars"):  # the driver's environment (StreamSpec.env_vars): secrets masked like conf
        masked["env_vars"] = {k: (MASK if v not in (None, "") and is_secret_entry(k, v) else v)
                              for k, v in spec["env_vars"].items()}
    return masked


def spec_secrets(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, value)`` for every value of a spec dict that :func:`mask_spec` hides: private ``spark_conf``
    values (``spark_conf.<key>``), secret arguments (``application_args[<i>]``, the whole argument),
    ``secret_args`` and secret ``env_vars`` values. For a masker to hide them wherever a spec is shown whole
    (Airflow's rendered template fields), and to name them. ``[]`` for what is not a spec dict."""
    try:
        masked = mask_spec(spec)
    except (TypeError, ValueError, AttributeError):  # not a spec's shape: nothing we know to be private
        return []
    found: list[tuple[str, str]] = []

    def walk(path: str, mine: Any, shown: Any) -> None:
        if isinstance(mine, Mapping) and isinstance(shown, Mapping):
            for key, value in mine.items():
                if key in shown:
                    walk(f"{path}.{key}" if path else str(key), value, shown[key])
        elif isinstance(mine, (list, tuple)) and isinstance(shown, (list, tuple)):
            for index, (value, other) in enumerate(zip(mine, shown)):
                walk(f"{path}[{index}]", value, other)
        elif mine is not None and not isinstance(mine, (Mapping, list, tuple)) and shown != mine:
            found.append((path, str(mine)))

    walk("", spec, masked)
    return found


def spec_secret_values(spec: Mapping[str, Any]) -> list[str]:
    """The values of :func:`spec_secrets`."""
    return [value for _, value in spec_secrets(spec)]


def restore_secrets(spec: Mapping[str, Any], *sources: Any) -> dict[str, Any]:
    """``spec`` (a stored, masked spec dict) with every masked conf value taken from the first of
    ``sources`` (``StreamSpec`` or spec dicts: the caller's own spec) that has that key.

    Raises ``SpecError`` naming the key when no source holds the secret: a stored spec never carries it."""

    conf = dict(spec.get("spark_conf") or {})
    restored = dict(spec)
    for field_name in ("application_args", "secret_args"):
        stored = spec.get(field_name)
        if not stored or MASK not in (list(stored.values()) if isinstance(stored, Mapping) else
                                      " ".join(map(str, stored))):
            continue
        for source in sources:
            if source is None:
                continue
            theirs = source.get(field_name) if isinstance(source, Mapping) else getattr(source, field_name, None)
            if theirs and mask_spec({field_name: theirs if isinstance(theirs, Mapping) else list(theirs)}).get(
                    field_name) == (stored if isinstance(stored, Mapping) else list(stored)):
                restored[field_name] = dict(theirs) if isinstance(theirs, Mapping) else list(theirs)
                break
        else:
            raise SpecError(field_name, "its secrets are not stored in the stream's control files (they keep "
                            "specs with secrets masked): run the action with a spec that holds them (the DAG's spec "
                            "or the desired-state file)")
    env = dict(spec.get("env_vars") or {})
    for key, value in env.items():
        if value != MASK:
            continue
        for source in sources:
            theirs = (source.get("env_vars") if isinstance(source, Mapping) else getattr(source, "env_vars", {})) \
                if source is not None else None
            if (theirs or {}).get(key) not in (None, "", MASK):
                env[key] = theirs[key]
                break
        else:
            raise SpecError(f"env_vars.{key}", "this secret is not stored in the stream's control files (they keep "
                            "specs with secrets masked): run the action with a spec that holds it (the DAG's spec or "
                            "the desired-state file)")
    if env:
        restored["env_vars"] = env
    for key, value in conf.items():
        if value != MASK:
            continue
        for source in sources:
            if source is None:
                continue
            source_conf = source.get("spark_conf") if isinstance(source, Mapping) else getattr(source, "spark_conf", {})
            found = (source_conf or {}).get(key)
            if found not in (None, "", MASK):
                conf[key] = found
                break
        else:
            raise SpecError(f"spark_conf.{key}", "this secret is not stored in the stream's control files (they keep "
                            "specs with secrets masked): run the action with a spec that holds it (the DAG's spec or "
                            "the desired-state file)")
    return {**restored, "spark_conf": conf}

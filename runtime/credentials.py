"""Which values are credentials, and what is kept from whom: the configured key variables, the
names and shapes that make a variable or an argument a credential's, the keys a daemon with a
given config scrubs (:func:`config_secrets`), and the variables a local executor (and so every
command an agent runs) is started without (:func:`executor_hidden_env`). Pure functions of a
config and an environment; docs/decisions.md ("Credentials and trust: what the last audits
left" and the key sections before it) says why each rule is what it is."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Mapping
from urllib.parse import unquote, urlsplit

from events.secrets import Secrets

if TYPE_CHECKING:
    from .config import Config


# Read by the provider SDKs themselves when given no key: never passed on to tools either.
WELL_KNOWN_KEY_ENV = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def secret_env_names(cfg: Config) -> frozenset[str]:
    """Environment variables holding credentials: every provider's ``apiKeyEnv``, the remote
    executor's ``tokenEnv``, the web search backend's ``apiKeyEnv`` and the SDKs' own key variables. Executors (and so the commands
    tools run) are started without them."""
    names = {p.api_key_env for p in cfg.providers if p.api_key_env}
    if cfg.executor.token_env:
        names.add(cfg.executor.token_env)
    if cfg.web_search.api_key_env:
        names.add(cfg.web_search.api_key_env)
    return frozenset(names | set(WELL_KNOWN_KEY_ENV))


# The parts of a variable's name (split at `_`, `-`…) that make it a credential's, and the
# endings of a part that do (`APIKEY`, `ACCESSTOKEN`, `PGPASSWORD`).
_CREDENTIAL_WORDS = frozenset({"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PASSPHRASE", "AUTH",
                               "CREDENTIAL", "CREDENTIALS", "PAT", "COOKIE"})
_CREDENTIAL_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")


def is_credential_name(name: str) -> bool:
    """Whether a variable's name says it holds a credential (``GH_TOKEN``, ``NOTION_API_KEY``,
    ``DB_PASSWORD``; not ``PATH``, ``DATA_DIR``, ``TOKENIZERS_PARALLELISM``)."""
    parts = [part for part in re.split(r"[^A-Z0-9]+", name.upper()) if part]
    return any(part in _CREDENTIAL_WORDS or part.endswith(_CREDENTIAL_ENDINGS)
               for part in parts)


# Tokens whose shape says what they are, whatever the variable or argument holding them is
# called: GitHub, GitLab, Slack, OpenAI/Anthropic-style, Stripe, AWS access key ids, npm, Hugging
# Face, PyPI and Lens's own credentials. Matched against a whole value or a whole word
# (:func:`token_words`), never inside one: `PATH=/opt/npm_global_tools/bin` is no token.
_WORD_BREAK = re.compile(r"[\s=:,;&?'\"]+")
TOKEN_SHAPE = re.compile(r"(?:gh[pousr]_|github_pat_|glpat-|xox[abprs]-|xapp-|sk-|sk_live_|"
                         r"rk_live_|AKIA|ASIA|npm_|hf_|pypi-|lens_)[A-Za-z0-9_\-]{12,}")


# Said of a variable's name that is a key itself (:func:`is_key_in_place_of_a_name`), after the field's place.
KEY_IN_PLACE_OF_A_NAME = ("holds what looks like a key itself, not the name of an environment variable (the value "
                          "is not shown): put the key in a variable and give its name here")


def is_key_in_place_of_a_name(name: str | None) -> bool:
    """Whether a variable's name is a key itself (:data:`TOKEN_SHAPE`): a key pasted where its
    variable's name belongs, which would be echoed as that name in answers, notes and logs."""
    return bool(name) and TOKEN_SHAPE.fullmatch(name.strip()) is not None


def token_words(text: str) -> list[str]:
    """The words of ``text`` (split at blanks, ``=``, ``:``, ``,``, ``;``, ``&``, ``?``, quotes)
    that are token-shaped (:data:`TOKEN_SHAPE`) as a whole."""
    return [word for word in _WORD_BREAK.split(text) if TOKEN_SHAPE.fullmatch(word)]


def url_passwords(text: str) -> list[str]:
    """The passwords of the URLs among the words of ``text`` (split at blanks):
    ``PW`` of ``postgres://u:PW@h/db`` or ``redis://:PW@h``; none of ``https://h/p``."""
    found: list[str] = []
    for word in text.split():
        if "://" in word:
            try:
                password = urlsplit(word).password
            except ValueError:
                continue
            if password:
                found.append(password)
    return found


# The keys of a connection string whose value is a password or an account's key: libpq's keyword
# DSN (`host=h password=PW`), ODBC and ADO.NET (`Uid=u;Pwd=PW;`, `Password=PW;`), JDBC and URL
# query strings (`?password=PW`), Azure's storage and Service Bus strings (`AccountKey=…;`,
# `SharedAccessKey=…;`). Not `passfile` (a path), `password_reset`, `sslmode`.
DSN_PASSWORD_KEYS = ("password", "passwd", "pwd", "pass", "sslpassword", "accountkey", "sharedaccesskey")
# A `key=value` pair whose key is one of them: at the start, after a blank, `;`, `?` or `&`
# (never inside a word: `bypass=1`, `--password=…` is a flag's, judged as one); `=` may have
# blanks around it (libpq); the value single-quoted (libpq, `\'` inside), braced (ODBC, `}}`
# inside), double-quoted (ADO.NET) or bare up to a blank, `;` or `&`.
_DSN_PAIR = re.compile(r"(?:^|(?<=[\s;?&]))(?:" + "|".join(DSN_PASSWORD_KEYS) + r")\s*=\s*"
                       r"(?:'((?:[^'\\]|\\.)*)'|\{((?:[^}]|\}\})*)\}|\"([^\"]*)\"|([^\s;&'\"{][^\s;&]*))",
                       re.IGNORECASE)


def dsn_passwords(text: str) -> list[str]:
    """The passwords ``text`` holds in a data source name or connection string, as written and
    unquoted: a URL's (:func:`url_passwords`), and the value of each ``password=``-like pair
    (:data:`DSN_PASSWORD_KEYS`) of a URL's query string (``?password=PW``), a libpq keyword DSN
    (``host=h password=PW``, ``password='P W'``), an ODBC or ADO.NET connection string
    (``Pwd={PW};``, ``Password=PW;``). An empty value is none."""
    found = url_passwords(text)
    for match in _DSN_PAIR.finditer(text):
        quoted, braced, double, bare = match.groups()
        if quoted is not None:
            found += [quoted, re.sub(r"\\(.)", r"\1", quoted)]
        elif braced is not None:
            found += [braced, braced.replace("}}", "}")]
        elif double is not None:
            found.append(double)
        elif bare:
            found += [bare, unquote(bare)]
    return [value for value in dict.fromkeys(found) if value]


# An argument that is a credential's flag (`--token`, `--api-key`, `--password=…`).
_FLAG = re.compile(r"--?([A-Za-z][A-Za-z0-9_-]*)(=(.*))?", re.S)
# An argument that is an Authorization header (`Authorization: Bearer …`, as MCP proxies take).
_AUTH_HEADER = re.compile(r"\s*(?:proxy-)?authorization\s*:\s*(?:[A-Za-z][A-Za-z0-9_-]*\s+)?(\S+)\s*$", re.I)


def config_secrets(cfg: Config, environ: Mapping[str, str]) -> Secrets:
    """The keys a daemon with ``cfg`` knows, to keep out of all it stores, shows and says: the
    values ``environ`` holds under :func:`secret_env_names`, then what the config gives an MCP
    server that is a credential (:func:`mcp_credentials`), and the values of its ``envFrom``
    variables that are (by name, or by :data:`TOKEN_SHAPE`), and the passwords their
    connection strings hold (:func:`dsn_passwords`). Each is shown as
    ``[redacted NAME]``. Other values an MCP server is given (a path, a mode) are not:
    scrubbing every value of eight characters or more would blank ordinary words and paths out
    of that server's answers."""
    values: dict[str, str] = {}
    for name in sorted(withheld_env_names(cfg)):
        if value := environ.get(name):
            values.setdefault(value, name)
    for _where, name, value in mcp_credentials(cfg):
        values.setdefault(value, name)
    for name in sorted({name for s in cfg.mcp_servers.values() for name in s.env_from}):
        if (value := environ.get(name)) and TOKEN_SHAPE.fullmatch(value.strip()):
            values.setdefault(value, name)
        for password in dsn_passwords(value or ""):
            values.setdefault(password, name)
    return Secrets(values)


def mcp_credentials(cfg: Config) -> list[tuple[str, str, str]]:
    """(where in the config, marker name, value) of each credential the config hands an MCP
    server itself: an ``env`` literal whose name is a credential's (:func:`is_credential_name`)
    or whose value has a token's shape (:data:`TOKEN_SHAPE`: ``"GH": "ghp_…"``); in its ``args``,
    the value of a credential's flag (``--token X``, ``--api-key=X``), of an ``Authorization``
    header, a URL's or a connection string's password (``postgres://u:PASSWORD@h/db``,
    ``host=h password=PW``: :func:`dsn_passwords`) and any token-shaped word; in an ``env``
    literal under a plain name, the password of such a string (``"DSN": "…;Password=PW;"``)."""
    found: list[tuple[str, str, str]] = []
    for server, s in sorted(cfg.mcp_servers.items()):
        for name, value in sorted(s.env.items()):
            if value and (is_credential_name(name) or token_words(value)):
                found.append((f"mcpServers[{server!r}].env[{name!r}]", name, value))
            elif value:  # (`"DSN": "host=h password=PW"`: the password, not the whole string)
                found += [(f"mcpServers[{server!r}].env[{name!r}]", name, pw) for pw in dsn_passwords(value)]
        for i, arg in enumerate(s.args):
            where, name = f"mcpServers[{server!r}].args[{i}]", f"mcpServers.{server}.args"
            values: list[str] = []
            if (flag := _FLAG.fullmatch(arg)) and is_credential_name(flag.group(1)):
                if flag.group(2) is not None:
                    values.append(flag.group(3))
                elif i + 1 < len(s.args) and not s.args[i + 1].startswith("-"):  # (`--no-auth --port …`)
                    values.append(s.args[i + 1])
                    where = f"mcpServers[{server!r}].args[{i + 1}]"
            if header := _AUTH_HEADER.match(arg):
                values.append(header.group(1))
            values += dsn_passwords(arg)
            values += token_words(arg)
            found += [(where, name, value) for value in values if value]
    return found


def withheld_env_names(cfg: Config) -> frozenset[str]:
    """The daemon's variables no executor (nor any command it runs) is started with: those of
    :func:`secret_env_names`, and those an MCP server's ``envFrom`` passes on to it whose name
    is a credential's — the config hands those to that server, not to the agent's commands.
    (Others an ``envFrom`` names, ``PATH`` say, stay in the executor's environment.)"""
    passed_on = {name for s in cfg.mcp_servers.values() for name in s.env_from if is_credential_name(name)}
    return secret_env_names(cfg) | passed_on


# Variables that grant access without their name saying so: an ssh or gpg agent's socket, a
# Kerberos ticket cache. (SSH_AUTH_SOCK's name says it too: AUTH.)
AGENT_ENV = frozenset({"SSH_AUTH_SOCK", "GPG_AGENT_INFO", "KRB5CCNAME"})


def executor_hidden_env(cfg: Config, environ: Mapping[str, str]) -> frozenset[str]:
    """The variables of ``environ`` (the daemon's) a local executor is started without, and so
    every command and job an agent runs: :func:`withheld_env_names`, and every other variable
    named as a credential (:func:`is_credential_name`: ``AWS_SECRET_ACCESS_KEY``,
    ``GITHUB_TOKEN``, ``NPM_TOKEN``, ``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_CLIENT_SECRET``),
    holding a token-shaped value (:data:`TOKEN_SHAPE`) or a URL with a password
    (``DATABASE_URL=postgres://u:PW@h/db``, ``PGDSN=host=h password=PW``, ``Password=PW;``:
    :func:`dsn_passwords`; the whole variable, not the URL without its password, which would fail as a wrong password does), or among :data:`AGENT_ENV` — the
    operator's shell's credentials, which the config never gave
    the agent — but those ``executor.passEnv`` names (a command run to publish or to open a pull
    request needs its token); the configured keys are withheld whatever it says."""
    ambient = {name for name, value in environ.items()
               if name in AGENT_ENV or is_credential_name(name) or TOKEN_SHAPE.fullmatch(value.strip())
               or dsn_passwords(value)}
    return withheld_env_names(cfg) | (ambient - set(cfg.executor.pass_env))


def credential_literals(cfg: Config) -> list[str]:
    """Where ``cfg`` holds a credential's value itself (``mcpServers['gh'].env['GH_TOKEN']``,
    ``mcpServers['gh'].args[3]``), as :func:`config_secrets` takes them (:func:`mcp_credentials`)."""
    return list(dict.fromkeys(where for where, _name, _value in mcp_credentials(cfg)))

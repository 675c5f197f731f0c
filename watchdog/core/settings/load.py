"""Loading settings: the TOML file, `${ENV}` references, the environment, one error line.

The environment is read here and nowhere else: `WATCHDOG_CONFIG`, `WATCHDOG_STORE_URL`,
`XDG_DATA_HOME` (and `HOME`), and `${NAME}` references inside string values of the file
(docs/configuration.md#where-things-come-from). Every problem is a `ConfigError` naming the
file, the key and what is accepted (exit 2).
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from watchdog.core.errors import ConfigError, ConfigErrors
from watchdog.core.settings.model import CheckOverride, Settings, settings_model
from watchdog.core.settings.plugins import Plugins
from watchdog.core.settings.values import (
    MIN_PART,
    MissingSecret,
    WrittenPart,
    WrittenSecret,
    mask_secrets,
)
from watchdog.core.text import printable, shell_word
from watchdog.core.urls import StoreURLError, mask_url, parse_store_url

APP_DIR = "memory-watchdog"
# Under the data directory: the default embedded store, and the one `memory-watchdog demo` fills.
STORE_DIR = "store"
DEMO_STORE_DIR = "demo-store"
# In the data directory: the URL of the store `memory-watchdog demo` filled last (a `--store`
# elsewhere included), so that "there is no store here" can name it.
DEMO_POINTER = "last-demo-store"
# A config is a few KB; a larger file is no config (a wrong path, a log, a device's endless bytes).
MAX_CONFIG_BYTES = 1024 * 1024


def data_dir_from(env: Mapping[str, str]) -> Path:
    """The user's data directory for memory-watchdog: $XDG_DATA_HOME, else ~/.local/share."""
    base = env.get("XDG_DATA_HOME") or ""
    if not base:
        home = env.get("HOME") or str(Path.home())
        base = str(Path(home) / ".local" / "share")
    return Path(base) / APP_DIR


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def secret_keys(plugins: Plugins) -> frozenset[str]:
    """`<kind>.<key>` of every receiver's secret: its fields typed `Secret`."""
    return frozenset(
        f"{entry.model.kind}.{key}"
        for entry in plugins.receivers
        for key in entry.model.secret_keys()
    )


def _secret_key(path: str, secrets: frozenset[str]) -> bool:
    """Whether `path` (alerts.slack.token, alerts.webhook.<name>.url, ingest.token) holds a secret.

    An unset `${NAME}` there is a MissingSecret, reported where it is used, so that
    commands that send or receive nothing still run. The receivers' secret keys are
    their fields typed `Secret` (`secrets`, of the registry validated against).
    """
    if path == "ingest.token":
        return True
    parts = path.split(".")
    return len(parts) >= 3 and parts[0] == "alerts" and f"{parts[1]}.{parts[-1]}" in secrets


def _missing_secret(
    value: str, env: Mapping[str, str], path: str, secrets: frozenset[str]
) -> MissingSecret | None:
    """A MissingSecret when `value` is `${NAME}` in a secret key and NAME is unset."""
    match = _ENV_REF.fullmatch(value.strip())
    if (
        match is None
        or not _secret_key(path, secrets)
        or match.group(1) in env
        or match.group(2) is not None
    ):
        return None
    return MissingSecret(key=path, variable=match.group(1))


def _expand_env(value: Any, env: Mapping[str, str], path: str, secrets: frozenset[str]) -> Any:
    """Replace `${NAME}` (or `${NAME:-default}`) in every string of the parsed TOML.

    A secret becomes a WrittenSecret that records which of its parts came from a reference,
    so that a receiver shows what the file says (a webhook's path) and never what the
    environment gave.
    """
    if isinstance(value, str):
        missing = _missing_secret(value, env, path, secrets)
        if missing is not None:
            return missing

        def substitute(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(
                path, f"environment variable {name} is not set (referenced as ${{{name}}})"
            )

        if _secret_key(path, secrets):
            return WrittenSecret(_written_parts(value, substitute))
        return _ENV_REF.sub(substitute, value)
    if isinstance(value, dict):
        return {
            k: _expand_env(v, env, f"{path}.{k}" if path else k, secrets) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_expand_env(v, env, f"{path}[{i}]", secrets) for i, v in enumerate(value)]
    return value


def _written_parts(
    value: str, substitute: Callable[[re.Match[str]], str]
) -> tuple[WrittenPart, ...]:
    """`value`'s literal text and its references' values, in order, each reference as shown:
    `${NAME}`, or `${NAME:-***}` (a default may be a secret written for development)."""
    parts: list[WrittenPart] = []
    end = 0
    for match in _ENV_REF.finditer(value):
        if match.start() > end:
            parts.append((value[end : match.start()], None))
        shown = f"${{{match.group(1)}{':-***' if match.group(2) is not None else ''}}}"
        parts.append((substitute(match), shown))
        end = match.end()
    if end < len(value) or not parts:
        parts.append((value[end:], None))
    return tuple(parts)


def _describe(error: Any, root: type[Settings]) -> tuple[str, str]:
    """The key path and problem of one of pydantic's errors, in our words."""
    loc = [str(part) for part in error["loc"]]
    kind = error["type"]
    key = _key_path(error["loc"])
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1], root)
        fields = parent.model_fields.items() if parent else ()
        accepted = ", ".join(field.alias or name for name, field in fields)
        return key, f"unknown key (accepted: {accepted})" if accepted else "unknown key"
    if kind in ("literal_error", "enum"):
        expected = error.get("ctx", {}).get("expected", "")
        return key, f"{error.get('input')!r} is not accepted (accepted: {expected})"
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    if kind in ("missing",):
        return key, "is required"
    return key, message


def _problems(exc: ValidationError, origin: str | None, root: type[Settings]) -> list[ConfigError]:
    """Every error pydantic found (each field of each section), in our words."""
    return [ConfigError(*_describe(error, root), origin=origin) for error in exc.errors()]


def _besides_custom_checks(
    exc: ConfigError, data: Mapping[str, Any], origin: str | None, root: type[Settings]
) -> list[ConfigError]:
    """The problems of the rest of the file, when a `[[checks.custom]]` table stopped pydantic.

    A custom table's problem (`CustomKinds.validate`) ends that validation before it reports
    the other sections: those are validated again without the custom tables. The rules that
    span sections (an override's check id, say) are left to a file whose tables are sound, as
    they would name a custom check that is only missing here.
    """
    if not exc.key.startswith("checks.custom"):
        return []
    try:
        root.model_validate({**data, "custom_checks": ()})
    except ValidationError as again:
        return _problems(again, origin, root)
    except ConfigError:
        pass
    return []


def _key_path(loc: Sequence[Any]) -> str:
    """pydantic's location as the config names it: `alerts.routes[0].receivers`."""
    key = ""
    for part in loc:
        key += f"[{part}]" if isinstance(part, int) else f".{part}" if key else str(part)
    return key


def _model_at(loc: list[str], root: type[Settings]) -> type[BaseModel] | None:
    """The settings model at `loc` (a dict's key or a list's index is skipped past)."""
    model: type[BaseModel] = root
    parts = iter(loc)
    for part in parts:
        field = model.model_fields.get(part)
        if field is None and model is not root:
            # A model whose extra keys are typed (`[slo.<name>]`): the key names one of those.
            extra = typing.get_type_hints(model).get("__pydantic_extra__")
            models = _models_in(extra) if extra is not None else []
            if not models:
                return None
            model = models[0]
            continue
        if field is None:
            return CheckOverride if part else None
        annotation = field.annotation
        if part == "checks" and model is root:
            return CheckOverride if next(parts, None) is not None else None
        origin = getattr(annotation, "__origin__", None)
        candidates = _models_in(annotation)
        if not candidates:
            return None
        if origin in (dict, tuple, list) and next(parts, None) is None:
            return None  # the error is about the collection itself
        model = candidates[0]
    return model


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The settings models an annotation holds (`X | None`, `dict[str, X]`, `tuple[X, ...]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()):
        found += _models_in(arg)
    return found


def settings_from_mapping(
    data: Mapping[str, Any],
    *,
    plugins: Plugins,
    env: Mapping[str, str] | None = None,
    origin: str | None = None,
) -> Settings:
    """Validate parsed TOML into Settings of the registry `plugins`; ConfigError names the
    first bad key.

    The key and the problem are made printable (control characters escaped): a TOML
    key may hold an ESC or a CR, and the error is one line on a terminal.
    """
    try:
        return _validated(data, plugins, os.environ if env is None else env, origin)
    except ConfigError as exc:
        raise ConfigErrors.of(
            [
                ConfigError(
                    printable(one.key, 300), printable(one.problem, None), origin=one.origin
                )
                for one in exc.problems
            ]
        ) from None


def _secrets_in(value: Any, path: str = "") -> set[str]:
    """Every configured secret's value: each secret key's, what each of its `${NAME}` gave,
    and the password of `store.url` (`WATCHDOG_STORE_URL`'s is added by the caller)."""
    if isinstance(value, WrittenSecret):
        given = (text for text, reference in value.parts if reference is not None)
        return {value.get_secret_value(), *given}
    if isinstance(value, dict):
        return {s for k, v in value.items() for s in _secrets_in(v, f"{path}.{k}" if path else k)}
    if isinstance(value, list):
        return {s for v in value for s in _secrets_in(v, path)}
    if path == STORE_URL_KEY and isinstance(value, str):
        return _store_password(value)
    return set()


def _store_password(url: str) -> set[str]:
    try:
        return {parse_store_url(url).password or ""}
    except StoreURLError:
        return set()


def _masked(value: Any, secrets: Sequence[tuple[str, str]], path: str = "") -> Any:
    """Every plain string of the expanded config with each secret's value in it as `***`.

    A secret written into a plain key (`source.name = "agents-${TOKEN}"` beside `bearer_token =
    "${TOKEN}"`) would show wherever that key shows: the report, `config check`, chat, logs,
    errors. Masked here, once, it exists nowhere else. Secret keys keep their values, and so
    does `store.url`, whose password connects (it is shown masked: watchdog.core.urls).
    """
    if isinstance(value, str) and path != STORE_URL_KEY:
        return mask_secrets(value, secrets)
    if isinstance(value, dict):
        return {k: _masked(v, secrets, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, secrets, path) for v in value]
    return value


STORE_URL_KEY = "store.url"


def _validated(
    data: Mapping[str, Any], plugins: Plugins, env: Mapping[str, str], origin: str | None
) -> Settings:
    expanded = _expand_env(dict(data), env, "", secret_keys(plugins))
    values = _secrets_in(expanded) | _store_password(env.get("WATCHDOG_STORE_URL", ""))
    secrets = [(s, "***") for s in values if len(s) >= MIN_PART]
    expanded = _masked(expanded, secrets)
    checks = expanded.get("checks")
    if isinstance(checks, dict) and "custom" in checks:
        checks = dict(checks)
        expanded = {**expanded, "checks": checks, "custom_checks": checks.pop("custom")}
    data_dir = data_dir_from(env)
    expanded.setdefault("data_dir", str(data_dir))
    root = settings_model(plugins)
    try:
        settings = root.model_validate(expanded)
    except ValidationError as exc:
        raise ConfigErrors.of(_problems(exc, origin, root)) from None
    except ConfigError as exc:
        found = [ConfigError(one.key, one.problem, origin=origin) for one in exc.problems]
        raise ConfigErrors.of(
            [*found, *_besides_custom_checks(exc, expanded, origin, root)]
        ) from None
    # Precedence: --store (applied by the caller), WATCHDOG_STORE_URL, store.url, the default.
    from_env = env.get("WATCHDOG_STORE_URL")
    url = from_env or settings.store.url or default_store_url(settings)
    check_store_url(url, "WATCHDOG_STORE_URL" if from_env else "store.url", origin=origin)
    if url != settings.store.url:
        settings = settings.with_store_url(url)
    check_store_tls(settings, "WATCHDOG_STORE_URL" if from_env else "store.url", origin=origin)
    if settings.ingest.listens:  # every command reads what the receiver writes
        settings = settings.receiving()
    return settings


def check_store_url(url: str, key: str, *, origin: str | None = None) -> None:
    """A ConfigError naming `key` when `url` is not a store URL."""
    try:
        parse_store_url(url)
    except StoreURLError as exc:
        raise ConfigError(key, str(exc), origin=origin if key == "store.url" else None) from None


def check_store_tls(settings: Settings, key: str, *, origin: str | None = None) -> None:
    """A ConfigError when TLS keys are set for a plain http:// server: they would be ignored and
    the traffic sent in clear (an embedded store has no network, so they do not apply there)."""
    given = settings.store.tls_set
    url = parse_store_url(settings.store.url)
    if given and url.kind == "http" and not url.secure:
        raise ConfigError(
            f"store.{given[0]}",
            f"TLS applies to an https:// server, and {key} is {url.masked}"
            " (write https://, port 8443 by default)",
            origin=origin,
        )


def config_file(path: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The config file to read: `path` (--config), else $WATCHDOG_CONFIG; None: the defaults."""
    env = os.environ if env is None else env
    return path or env.get("WATCHDOG_CONFIG") or None


def load_settings(
    path: str | None = None,
    *,
    plugins: Plugins,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Read the config file (`path`, else WATCHDOG_CONFIG, else defaults) into Settings of
    the registry `plugins`."""
    env = os.environ if env is None else env
    path = config_file(path, env)
    data: dict[str, Any] = {}
    if path:
        try:
            data = tomllib.loads(read_config_bytes(path).decode("utf-8"))
        except UnicodeDecodeError:
            raise ConfigError("", f"config file {path} is not UTF-8 text") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("", f"invalid TOML: {exc}", origin=path) from None
    settings = settings_from_mapping(data, plugins=plugins, env=env, origin=path)
    return settings.read_from(path) if path else settings


def command_flags(settings: Settings) -> str:
    """The flags a command printed for the user needs to read what `settings` read, quoted for
    a shell: `--config <the file>` when one was read, and always `--store <URL>` (the default
    one too: pasted into a shell whose WATCHDOG_STORE_URL names another store, the command
    still reads this one; a password masked: put it back, or set WATCHDOG_STORE_URL)."""
    flags = []
    if settings.config_file:
        flags += ["--config", shell_word(settings.config_file)]
    url = settings.store.url or default_store_url(settings)
    return " ".join([*flags, "--store", shell_word(mask_url(url))])


def default_store_url(settings: Settings) -> str:
    """The store every command opens when nothing names one: under the data directory (as
    an absolute path, which names the same store from any directory)."""
    return f"chdb://{(settings.data_dir / STORE_DIR).absolute()}"


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_config_bytes(path: str) -> bytes:
    """The config file's bytes, read with a bound: ConfigError (one line) for a path that is no
    regular file (a FIFO: opened without waiting for a writer; a directory, a socket, a block
    device; a character device is read, as `/dev/null` is an empty config) or that holds more
    than MAX_CONFIG_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigError("", f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError("", f"config file {path} is a directory") from None
    except PermissionError:
        raise ConfigError("", f"config file {path} is not readable") from None
    except OSError as exc:
        raise ConfigError("", f"config file {path} cannot be read: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        # A regular file, or a character device (`/dev/null`: no config; one without end, as
        # `/dev/zero`, meets the size bound; one with nothing ready is read without waiting).
        if not stat.S_ISREG(mode) and not stat.S_ISCHR(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise ConfigError("", f"config file {path} is not a regular file ({kind})")
        if stat.S_ISREG(mode):
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError("", f"config file {path} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            "",
            f"config file {path} is larger than {MAX_CONFIG_BYTES // 1024} KiB"
            " (a config is a few KB: is this the right file?)",
        )
    return data

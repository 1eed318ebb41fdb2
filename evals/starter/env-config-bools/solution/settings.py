PREFIX = "APP_"
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _convert(name: str, default, raw: str):
    if isinstance(default, bool):
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ValueError(f"setting {name}: {raw!r} is not a boolean")
    return type(default)(raw)


def load(defaults: dict, environ: dict) -> dict:
    """Defaults overridden by APP_<NAME> variables, converted to the default value's type."""
    result = dict(defaults)
    for name, default in defaults.items():
        key = PREFIX + name.upper()
        if key in environ:
            result[name] = _convert(name, default, environ[key])
    return result

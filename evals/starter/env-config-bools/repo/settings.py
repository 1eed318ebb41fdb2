PREFIX = "APP_"


def load(defaults: dict, environ: dict) -> dict:
    """Defaults overridden by APP_<NAME> variables, converted to the default value's type."""
    result = dict(defaults)
    for name, default in defaults.items():
        key = PREFIX + name.upper()
        if key in environ:
            result[name] = type(default)(environ[key])
    return result

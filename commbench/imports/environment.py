"""`commbench import … --env NAME=VALUE`: the environment a file was measured under, as the `env` label every imported
row carries (the label a sweep's --env-axis rows carry, commbench/sweep/env_axes.py), so that `commbench tune` can
compare logs taken under different NCCL_ALGO / NCCL_PROTO settings."""

from commbench.errors import CommbenchError
from commbench.sweep.env_axes import ENV_NAME, label_of

_EXAMPLE = "e.g. --env NCCL_ALGO=Tree --env NCCL_PROTO=Simple"


def environment_label(items: tuple[str, ...]) -> str:
    """The `env` label of the --env items ("" without any: the default environment). Values keep their spelling
    (NCCL reads them case-insensitively, and tune does too); a list such as NCCL_ALGO=ring,tree is kept whole."""
    environment: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals:
            raise CommbenchError(f"--env {item!r} sets no value; give NAME=VALUE, {_EXAMPLE}")
        if not ENV_NAME.match(name):
            raise CommbenchError(f"--env {item!r}: {name!r} is not an environment variable name; give NAME=VALUE "
                                 f"with a name of letters, digits and _ ({_EXAMPLE})")
        # the label joins NAME=VALUE pairs with spaces: a value with a space (or none) could not be read back
        if not value or any(character.isspace() for character in value):
            raise CommbenchError(f"--env {item!r}: the value is empty or holds a space; give NAME=VALUE with the "
                                 f"value as the variable was set, without spaces ({_EXAMPLE})")
        if name in environment:
            raise CommbenchError(f"--env sets {name} twice ({name}={environment[name]}, {item}); give each "
                                 "variable once")
        environment[name] = value
    return label_of(environment)

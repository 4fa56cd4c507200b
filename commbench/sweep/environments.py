"""A sweep's launch environments, resolved before anything launches: the combinations of --env-axis, --nccl-algo and
--nccl-proto, and the tuner plugin and config of --tuner-plugin / --tuner-config (NCCL_TUNER_PLUGIN and
NCCL_TUNER_CONFIG_FILE on every launch, recorded with the config's SHA-256)."""

import hashlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from commbench.errors import CommbenchError, CommbenchWarning
from commbench.names import GLOO
from commbench.sweep import env_axes

TUNER_PLUGIN_ENV, TUNER_CONFIG_ENV = "NCCL_TUNER_PLUGIN", "NCCL_TUNER_CONFIG_FILE"


@dataclass(frozen=True)
class LaunchEnvironments:
    combinations: tuple[dict, ...] = ({},)
    """Each an environment the sweep's points run under, in its own launch; ({},) = the sweep's own environment."""
    tuner: dict = field(default_factory=dict)
    """{"plugin", "config", "config_sha256"} with --tuner-plugin / --tuner-config, else {}."""

    @property
    def launch_env(self) -> dict[str, str]:
        """What every launch gets besides its combination."""
        added = {}
        if self.tuner.get("plugin"):
            added[TUNER_PLUGIN_ENV] = self.tuner["plugin"]
        if self.tuner.get("config"):
            added[TUNER_CONFIG_ENV] = self.tuner["config"]
        return added

    @property
    def varied(self) -> bool:
        return self.combinations != ({},)


class EnvironmentOptions(Protocol):
    """What the environments are made from: the collective bench's --env-axis, --nccl-algo, --nccl-proto,
    --tuner-plugin and --tuner-config (benches/collective.py's options)."""

    @property
    def env_axes(self) -> tuple[str, ...]: ...
    @property
    def nccl_algo(self) -> tuple[str, ...]: ...
    @property
    def nccl_proto(self) -> tuple[str, ...]: ...
    @property
    def tuner_plugin(self) -> str | None: ...
    @property
    def tuner_config(self) -> str | None: ...


def resolve(options: EnvironmentOptions, *, backend: str, in_job: bool) -> LaunchEnvironments:
    """The sweep's environments from its options; bad input refused in one line naming the fix. An NCCL_* variable
    on a gloo run changes nothing, which a warning says (its rows will tie)."""
    axes = env_axes.with_shortcuts(env_axes.parse_axes(options.env_axes), nccl_algo=options.nccl_algo,
                                   nccl_proto=options.nccl_proto)
    tuner = _tuner(options.tuner_plugin, options.tuner_config)
    if in_job and (axes or tuner):
        given = "--env-axis / --nccl-algo / --nccl-proto" if axes else "--tuner-plugin / --tuner-config"
        raise CommbenchError(f"{given} inside torchrun or srun: each environment needs a launch of its own, and the "
                             "job's ranks are started already; run commbench from outside the job, or set the "
                             "variables in the job's environment")
    ignored = env_axes.nccl_names(axes) + [name for name, key in ((TUNER_PLUGIN_ENV, "plugin"),
                                                                    (TUNER_CONFIG_ENV, "config")) if key in tuner]
    if backend == GLOO and ignored:
        warnings.warn(f"{', '.join(ignored)} on a gloo run: only NCCL reads {'them' if len(ignored) > 1 else 'it'}, "
                      "so the rows measure the same thing and will tie; use --backend nccl on GPUs",
                      CommbenchWarning, stacklevel=2)
    return LaunchEnvironments(tuple(env_axes.combinations(axes)), tuner)


def _tuner(plugin: str | None, config: str | None) -> dict:
    if not plugin and not config:
        return {}
    if not config:
        raise CommbenchError("--tuner-plugin without --tuner-config: give the config the plugin reads, e.g. "
                             "--tuner-config nccl_tuner.conf (commbench tune writes one)")
    config_path = Path(config).expanduser().resolve()
    if not config_path.is_file():
        raise CommbenchError(f"--tuner-config {config}: no such file; write one with commbench tune RUN --out FILE")
    tuner = {"config": str(config_path), "config_sha256": hashlib.sha256(config_path.read_bytes()).hexdigest()}
    if plugin:
        plugin_path = Path(plugin).expanduser()
        # a bare library name (libnccl-tuner-example.so) is NCCL's to find on the library path
        if plugin_path.parent != Path(".") or plugin_path.exists():
            plugin_path = plugin_path.resolve()
            if not plugin_path.is_file():
                raise CommbenchError(f"--tuner-plugin {plugin}: no such file; build NVIDIA's example plugin (make in "
                                     "nccl/plugins/tuner/example) and pass the .so it writes")
        tuner["plugin"] = str(plugin_path)
    return tuner

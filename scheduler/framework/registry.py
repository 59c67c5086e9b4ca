"""Plugin registry: in-tree plugins plus third-party ones from the
`troupe.plugins` entry-point group (a package declares
`[project.entry-points."troupe.plugins"] MyPlugin = "pkg.module:MyPlugin"`)."""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

from pydantic import BaseModel

from .interface import Plugin

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "troupe.plugins"


class Registry:
    def __init__(self) -> None:
        self._plugins: dict[str, type[Plugin]] = {}

    def register(self, plugin: type[Plugin]) -> None:
        if not plugin.name:
            raise ValueError(f"{plugin.__qualname__} has no `name`")
        if not (isinstance(plugin.Args, type) and issubclass(plugin.Args, BaseModel)):
            raise ValueError(f"{plugin.__qualname__}.Args is not a pydantic model")
        if plugin.name in self._plugins and self._plugins[plugin.name] is not plugin:
            raise ValueError(f"plugin {plugin.name!r} registered twice")
        self._plugins[plugin.name] = plugin

    def get(self, name: str) -> type[Plugin] | None:
        return self._plugins.get(name)

    def names(self) -> list[str]:
        return sorted(self._plugins)

    def args_models(self) -> dict[str, type[BaseModel]]:
        """Each plugin's args model by plugin name (for load_config's plugin_args)."""
        return {name: plugin.Args for name, plugin in self._plugins.items()}

    def load_entry_points(self) -> None:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            plugin = ep.load()
            if not (isinstance(plugin, type) and issubclass(plugin, Plugin)):
                raise ValueError(f"entry point {ep.name} = {ep.value}: not a troupe Plugin subclass")
            self.register(plugin)
            log.info("loaded plugin %s from %s", plugin.name, ep.value)

"""Named strategies of the plugin (drafters, acceptance rules): one registry per kind, filled by a
decorator next to each class, so a name, its help text and its class live in one place and the
task's option choices and help are read from here."""
from typing import Callable, Dict


class Registry:
    """``@REGISTRY.register("name", help="...")`` on a class; ``REGISTRY[name]``, ``REGISTRY.names``,
    ``REGISTRY.help()`` (``name: help; ...`` for an option's help text), ``REGISTRY.check(name)``."""

    def __init__(self, option: str):
        self.option = option  # the command-line option that picks from it, for error messages
        self._entries: Dict[str, type] = {}
        self._help: Dict[str, str] = {}

    def register(self, *names: str, help: str) -> Callable[[type], type]:
        def add(cls):
            for name in names:
                if name in self._entries:
                    raise ValueError(f"{self.option} {name!r} is registered twice")
                self._entries[name], self._help[name] = cls, help
            return cls
        return add

    @property
    def names(self):
        return tuple(self._entries)

    def __contains__(self, name) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> type:
        self.check(name)
        return self._entries[name]

    def check(self, name: str) -> None:
        if name not in self._entries:
            raise ValueError(f"{self.option} {name!r} is unknown; choose one of {', '.join(self._entries)}")

    def help(self) -> str:
        """``a, b: help; c: help``: names registered together share their help."""
        groups: Dict[str, list] = {}
        for name, text in self._help.items():
            groups.setdefault(text, []).append(name)
        return "; ".join(f"{', '.join(names)}: {text}" for text, names in groups.items())

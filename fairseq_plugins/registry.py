"""Named strategies of the plugin (drafters, acceptance rules): one registry per kind, filled by a
decorator next to each class, so a name, its help text, its class and its options live in one
place, and the task's option choices, help and option fields are read from here."""
import dataclasses
from typing import Callable, Dict, Optional


class Registry:
    """``@REGISTRY.register("name", help="...", options=Options)`` on a class; ``REGISTRY[name]``,
    ``REGISTRY.names``, ``REGISTRY.help()`` (``name: help; ...`` for an option's help text),
    ``REGISTRY.check(name)``, ``REGISTRY.with_options(config)`` (the options merged into a config).
    A class registered under one name gets it as its ``name`` attribute.

    ``options``: a dataclass of the strategy's own command-line options (fairseq's style: fields
    with defaults and ``metadata={"help": ...}``; ``copy_ngram`` is ``--copy-ngram``).  Every
    registered strategy's options become options of the task, whichever strategy a run picks, so
    their names must be unique among all of them."""

    def __init__(self, option: str):
        self.option = option  # the command-line option that picks from it, for error messages
        self._entries: Dict[str, type] = {}
        self._help: Dict[str, str] = {}
        self._options: Dict[str, type] = {}  # name -> its options dataclass (names registered together share one)

    def register(self, *names: str, help: str, options: Optional[type] = None) -> Callable[[type], type]:
        if options is not None and not dataclasses.is_dataclass(options):
            raise TypeError(f"{self.option} {names[0]!r}: options= takes a dataclass of its options (got {options!r})")

        def add(cls):
            for name in names:
                if name in self._entries:
                    raise ValueError(f"{self.option} {name!r} is registered twice")
                self._entries[name], self._help[name] = cls, help
                if options is not None:
                    self._options[name] = options
            if len(names) == 1:  # the class's ``name`` (stats, messages); a class of several names sets it per instance
                cls.name = names[0]
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

    def option_fields(self):
        """``(owner, field)`` of every registered options dataclass, once each (``owner``: ``--drafter a, b``)."""
        owners: Dict[type, list] = {}
        for name, options in self._options.items():
            owners.setdefault(options, []).append(name)
        return [(f"{self.option} {', '.join(names)}", f) for options, names in owners.items()
                for f in dataclasses.fields(options)]

    def with_options(self, config: type) -> type:
        """``config`` (a dataclass) with every registered strategy's options added as fields: a
        subclass of the same name, so fairseq's parser, ``--help`` and ``cfg`` read them as the
        config's own.  A name two of them share is an error (the options of every strategy are
        options of one command line)."""
        owner_of = {f.name: f.metadata.get("owner", f"the task's config ({config.__name__})")
                    for f in dataclasses.fields(config)}
        added = []
        for owner, f in self.option_fields():
            if f.name in owner_of:
                flag = "--" + f.name.replace("_", "-")
                raise ValueError(f"{flag}, an option of {owner}, is already an option of {owner_of[f.name]}: "
                                 f"rename one of them (every drafter's and rule's options share fairseq-generate's "
                                 f"command line)")
            owner_of[f.name] = owner
            default = {"default_factory": f.default_factory} if f.default is dataclasses.MISSING else {"default": f.default}
            added.append((f.name, f.type, dataclasses.field(**default, metadata={**f.metadata, "owner": owner})))
        merged = dataclasses.make_dataclass(config.__name__, added, bases=(config,))
        merged.__module__, merged.__qualname__, merged.__doc__ = config.__module__, config.__qualname__, config.__doc__
        return merged

"""Name → implementation registries: selectors, advantage estimators, losses and tasks.

Each registry lives beside what it names (``bsb.engine.selectors.SELECTORS``, ``bsb.train.advantages.ADVANTAGES``,
``bsb.train.loss.LOSSES``, ``bsb.tasks.registry.TASKS``). Code outside bsb adds its own with the decorator, as verl's
``register_adv_est`` does::

    from bsb.engine.selectors import SELECTORS, Selector

    @SELECTORS.register("my_selector")
    class MySelector(Selector): ...

and a config names it either by its registered name once its module is imported (``plugins: [my_pkg.mod]``) or as
``my_pkg.mod:MySelector`` (the module is imported, then the object is checked before anything is built or called).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Names of one kind of implementation. ``check(obj)`` returns why ``obj`` is not one ("" when it is); it runs on
    everything registered or looked up by ``module:attr``, before the object is used."""

    def __init__(self, kind: str, check: Callable[[object], str] | None = None, noun: str = "class"):
        self.kind, self.noun = kind, noun  # noun: what a module:attr names (class, function)
        self._check = check
        self._items: dict[str, T] = {}
        self._about: dict[str, str] = {}

    def register(self, name: str, about: str = "") -> Callable[[T], T]:
        """Decorator: register the decorated class or function under ``name`` (``about``: a few words for help)."""
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a {self.kind} name must be a non-empty string without ':', got {name!r}")

        def add(obj: T) -> T:
            self._validate(obj, name)
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered ({self._items[name]!r})")
            self._items[name] = obj
            if about:
                self._about[name] = about
            return obj

        return add

    def _validate(self, obj: object, name: str) -> None:
        why = self._check(obj) if self._check else ""
        if why:
            raise ValueError(f"{self.kind} {name!r}: {why}")

    def get(self, name: str) -> T:
        """The implementation named ``name``: a registered name, or ``package.module:attr`` (imported and checked)."""
        if not isinstance(name, str):
            raise ValueError(f"a {self.kind} is named by a string, got {name!r}")
        if name in self._items:
            return self._items[name]
        if ":" not in name:
            raise ValueError(
                f"unknown {self.kind} {name!r}; choose one of {', '.join(self._items)}, or package.module:Name "
                f"for your own"
            )
        module_name, _, attr = name.partition(":")
        module = _import(module_name, f"{self.kind} {name!r}: module {module_name!r}")
        obj = getattr(module, attr, None)
        if obj is None:
            raise ValueError(f"{self.kind} {name!r}: {module_name} has no {self.noun} {attr!r}")
        self._validate(obj, name)
        return obj

    def names(self) -> list[str]:
        return list(self._items)

    def help(self, names: list[str] | None = None) -> str:
        """``name (about) | name | ...`` over ``names`` (default: every registered one), then how to name your own:
        help texts are built from the registry, never listed by hand."""
        shown = [f"{n} ({self._about[n]})" if n in self._about else n for n in (names or self._items)]
        return " | ".join(shown) + f", or package.module:{'Class' if self.noun == 'class' else 'function'}"

    def items(self):
        return self._items.items()

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __len__(self) -> int:
        return len(self._items)


def import_plugins(modules) -> None:
    """Import user modules that register their own implementations (a config's ``plugins``); one clear error for a
    module that does not import."""
    for module in modules or ():
        if not isinstance(module, str) or not module:
            raise ValueError(f"plugins must be importable module names, got {module!r}")
        _import(module, f"plugin module {module!r}")


def _import(module: str, what: str):
    """``module`` imported; one ValueError naming ``what`` for a relative or empty name, a module that does not import,
    or one that fails while it runs (its own error chained)."""
    if not module or module.startswith("."):
        raise ValueError(f"{what}: name an absolute module (package.module)")
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ValueError(f"{what} does not import ({err})") from None
    except Exception as err:  # the user's module failed while running: its traceback stays chained
        raise ValueError(f"{what} failed to import ({type(err).__name__}: {err})") from err

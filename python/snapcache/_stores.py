"""Which store a load uses when the caller names none."""

from typing import Union

from . import _core


class _Default:
    def __repr__(self) -> str:
        return "<the environment's store>"


DEFAULT = _Default()

# A load's `store=`: a Store, None (no cache: the load is ineligible), or DEFAULT (the environment's).
StoreChoice = Union[_core.Store, None, _Default]


def default_store(**overrides: object) -> _core.Store:
    """The store loads use when none is given: Store.open_for_loading(Config.from_environment()),
    with keyword overrides (prepared_weight_cache=False, prepared_weight_cache_gib=64, ...).
    Never raises for the cache's sake: a cache that cannot be used is `unavailable`, with the reason.
    """
    return _core.Store.open_for_loading(None, **overrides)


def store_for(store: StoreChoice) -> Union[_core.Store, None]:
    """`store` as given (None: no cache, the load is ineligible), or the default store."""
    return default_store() if isinstance(store, _Default) else store

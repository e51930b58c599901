"""snapcache for vLLM: the load format `snapcache`.

    pip install snapcache            # into vLLM's environment, built against its torch
    vllm serve MODEL --load-format snapcache
    LLM(model=MODEL, load_format="snapcache")

The package declares `register` below in vLLM's plugin group `vllm.general_plugins`
(pyproject.toml), so every vLLM process (the API server, the engine, each worker) knows the load
format with no import in the user's code. A cold load is vLLM's default loader; after its
`load_weights` and before `process_weights_after_loading`, this rank's parameters and buffers are
published as an entry. A warm load builds the model as vLLM builds it and binds the entry's
tensors instead of reading the checkpoint; `process_weights_after_loading` runs on both paths.
Any failure of the cache falls back to vLLM's default loader, with the reason in vLLM's log. See
docs/vllm.md.

Importing this module does not import vLLM: `register` does, when vLLM calls it.
"""

import logging

LOAD_FORMAT = "snapcache"

_logger = logging.getLogger("vllm.snapcache")


def register() -> None:
    """vLLM's plugin entry point: registers the load format `snapcache`. Called in every vLLM
    process, perhaps more than once; cheap. A vLLM whose loader API this integration does not know
    gets a warning in its log and no load format, never an error: vLLM runs as without snapcache."""
    try:
        from ._vllm_loader import register_loader

        register_loader(LOAD_FORMAT)
    except Exception as e:  # noqa: BLE001 - any failure here must leave vLLM running without us
        _logger.warning("snapcache: load format %r not registered (this vLLM's loader API is not the one snapcache "
                        "knows): %s: %s", LOAD_FORMAT, type(e).__name__, e)

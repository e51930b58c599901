"""A process for test_interrupt.py: loads a small checkpoint through snapcache with one part of the
load blocked, prints "blocking" when it gets there, and waits for the test's SIGINT. What the
interrupt does to the load is what the process shows: a KeyboardInterrupt's traceback (and death
by SIGINT), or "returned" when the load came back normally.

    python interrupt_worker.py MODE CHECKPOINT CACHE [BIG_FILE]

MODE: loader      the ordinary loader sleeps in small steps
      post_load   a post-load method does
      refresh     a refresh hook does
      sink        the `logging` handler of the snapcache logger does, on the load's own line
      stage       nothing blocks in Python: the key stage digests BIG_FILE (hash_checkpoint_contents),
                  a long stage in C++ without the GIL; the loader prints "loader called" if it runs
"""

import logging
import sys
import time

import snapcache

MODE, CHECKPOINT, CACHE = sys.argv[1], sys.argv[2], sys.argv[3]


def block():
    print("blocking", flush=True)
    while True:  # until interrupted
        time.sleep(0.01)


def loader(plan):
    if MODE == "stage":
        print("loader called", flush=True)
    if MODE == "loader":
        block()
    f = snapcache.SafetensorsFile.open(plan.checkpoint_files[0])
    return {name: t.clone() for name, t in f.tensors().items()}


def post_load(tensors):
    block()


def refresh(weights, buffers, device):
    block()


class BlockingHandler(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("load blocked"):
            block()


def main():
    f = snapcache.SafetensorsFile.open(CHECKPOINT)
    plan = snapcache.LoadPlan(checkpoint_files=[CHECKPOINT], component="blocked", source_identity="interrupt-v1",
                              dtype="float32", expected=f.layout(), ordinary_loader=loader)
    if MODE == "post_load":
        plan.post_load = [post_load]
    if MODE == "refresh":
        plan.refresh_hooks = [refresh]
    if MODE == "sink":
        logger = logging.getLogger("snapcache")
        logger.setLevel(logging.INFO)
        logger.addHandler(BlockingHandler())
    if MODE == "stage":
        plan.checkpoint_files = [CHECKPOINT, sys.argv[4]]
        plan.hash_checkpoint_contents = True
        snapcache.route_logs_to_logging(False)  # no Python runs during the load: only the stage checks
        print("blocking", flush=True)
    store = snapcache.Store.open(snapcache.Config(directory=CACHE))
    snapcache.load_model(plan, store=store)
    print("returned", flush=True)


main()

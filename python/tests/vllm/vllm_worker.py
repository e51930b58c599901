"""One vLLM engine in this process (the vLLM tests run each load in a new process): loads MODEL
with the given load format, generates greedily, and prints one line `RESULT {json}`: the tokens,
every parameter's and buffer's digest after process_weights_after_loading (per rank), and what
snapcache's loader reported.

    python vllm_worker.py MODEL [--load-format snapcache] [--extra JSON] [--tp 2] [--dtype bfloat16]
                                [--hf-overrides JSON]

With --tp 1 (the engine in this process) the result also has "opened": the files of MODEL any
process opened while the loader's load_model ran (inotify, file_opens.py). Only that window: vLLM
itself reads a checkpoint's safetensors headers while it makes its config (for a model with tied
embeddings, `checkpoint_has_lm_head`), whatever the load format.
"""

import argparse
import json
import os

# Before vLLM is imported: one process for a TP-1 engine (a TP-2 engine's workers are processes of
# their own), no Hub, a small KV cache, reproducible CPU GEMMs whatever the operands' alignment.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # apply_model's functions reach the workers

from file_opens import FileOpens  # noqa: E402
from model_probes import digests, report  # noqa: E402

PROMPTS = [[1, 17, 42, 99, 7, 250], [1, 300, 5, 64], [1, 3, 3, 3, 3, 3, 3, 3]]


def watch_the_loader(directory, opened):
    """Every vLLM loader's load_model (BaseModelLoader's, which snapcache's calls too) inside a
    FileOpens of `directory`; the names it saw appended to `opened`."""
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    load_model = BaseModelLoader.load_model

    def watched(self, *args, **kwargs):
        opens = FileOpens(directory)
        try:
            with opens:
                return load_model(self, *args, **kwargs)
        finally:
            opened.extend(opens.names())  # after the with: its exit reads the events

    BaseModelLoader.load_model = watched


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--extra", default="{}")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--hf-overrides", default="{}")
    a = parser.parse_args()
    if a.tp == 1:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    else:
        # vLLM's CPU build binds each rank's threads to a NUMA node of its own and refuses more ranks
        # than nodes; a test machine has one. The allowed CPUs shared out by hand, "0|1" on two.
        cpus = sorted(os.sched_getaffinity(0))
        shares = [cpus[r::a.tp] or cpus for r in range(a.tp)]
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(",".join(map(str, s)) for s in shares))

    from vllm import LLM, SamplingParams

    opened: list[str] = []
    if a.tp == 1:
        watch_the_loader(a.model, opened)

    llm = LLM(model=a.model, load_format=a.load_format, model_loader_extra_config=json.loads(a.extra),
              dtype=a.dtype, tensor_parallel_size=a.tp, distributed_executor_backend="uni" if a.tp == 1 else "mp",
              hf_overrides=json.loads(a.hf_overrides), enforce_eager=True, max_model_len=256, max_num_seqs=4, seed=0)
    outputs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS],
                           SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    result = {
        "tokens": [list(o.outputs[0].token_ids) for o in outputs],
        "digests": llm.apply_model(digests),
        "reports": llm.apply_model(report),
        "opened": sorted(set(opened)) if a.tp == 1 else None,
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

"""Writes the vLLM tests' checkpoints: small models with random weights, as a Hugging Face model
directory (config.json from transformers' config class, safetensors weights under the checkpoint
names vLLM reads, the framework tests' word-level tokenizer), made here, never downloaded.

    python vllm_models.py DIRECTORY [NAME ...]     # NAME: llama, tied, moe, w8a8 (default: all)
    python vllm_models.py DIRECTORY llama --hidden 2048 --layers 24 --vocab 32000   # the benchmark's

- llama: a dense Llama in bfloat16, in two shards with an index (model.safetensors.index.json);
- tied: a Qwen2 with tied word embeddings (no lm_head in the checkpoint) and q/k/v biases;
- moe: a Mixtral with four experts, two per token;
- w8a8: the Llama quantized as compressed-tensors W8A8 INT8 (int8 weights with per-channel scales,
  dynamic per-token int8 activations), which vLLM's CPU build runs.
"""

import argparse
import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from framework_models import _word_level_tokenizer  # noqa: E402

SEED = 20261206


def _normal(generator, *shape, scale=0.02, dtype=torch.bfloat16):
    return (torch.randn(*shape, generator=generator) * scale).to(dtype)


def _norm(generator, size, dtype=torch.bfloat16):
    return (1.0 + torch.randn(size, generator=generator) * 0.05).to(dtype)


def _decoder(generator, a, layer_mlp):
    """Llama-family tensors under their checkpoint names; `layer_mlp(i)` gives layer i's MLP."""
    h, heads, kv, vocab = a.hidden, a.heads, a.kv_heads, a.vocab
    head_dim = h // heads
    t = {"model.embed_tokens.weight": _normal(generator, vocab, h), "model.norm.weight": _norm(generator, h)}
    for i in range(a.layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = _norm(generator, h)
        t[p + "post_attention_layernorm.weight"] = _norm(generator, h)
        t[p + "self_attn.q_proj.weight"] = _normal(generator, heads * head_dim, h)
        t[p + "self_attn.k_proj.weight"] = _normal(generator, kv * head_dim, h)
        t[p + "self_attn.v_proj.weight"] = _normal(generator, kv * head_dim, h)
        t[p + "self_attn.o_proj.weight"] = _normal(generator, h, heads * head_dim)
        t.update({p + k: v for k, v in layer_mlp(i).items()})
    return t


def _dense_mlp(generator, a):
    return lambda i: {
        "mlp.gate_proj.weight": _normal(generator, a.intermediate, a.hidden),
        "mlp.up_proj.weight": _normal(generator, a.intermediate, a.hidden),
        "mlp.down_proj.weight": _normal(generator, a.hidden, a.intermediate),
    }


def _save(directory, config, tensors, shards=1, quantization=None):
    os.makedirs(directory, exist_ok=True)
    config.save_pretrained(directory)
    if quantization is not None:
        path = os.path.join(directory, "config.json")
        with open(path) as f:
            data = json.load(f)
        data["quantization_config"] = quantization
        with open(path, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
    names = sorted(tensors)
    if shards == 1:
        save_file({n: tensors[n].contiguous() for n in names}, os.path.join(directory, "model.safetensors"),
                  metadata={"format": "pt"})
    else:
        weight_map = {}
        for s in range(shards):
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = names[s::shards]
            save_file({n: tensors[n].contiguous() for n in part}, os.path.join(directory, file),
                      metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(part, file))
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)


def _llama(seed, a):
    """A dense Llama's config and tensors."""
    from transformers import LlamaConfig

    g = torch.Generator().manual_seed(seed)
    config = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                         num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                         max_position_embeddings=a.max_positions, tie_word_embeddings=False, dtype="bfloat16",
                         bos_token_id=1, eos_token_id=1)
    tensors = _decoder(g, a, _dense_mlp(g, a))
    tensors["lm_head.weight"] = _normal(g, a.vocab, a.hidden)
    return config, tensors


def llama(directory, a, shards=2):
    config, tensors = _llama(SEED, a)
    _save(directory, config, tensors, shards=shards)


def tied(directory, a):
    from transformers import Qwen2Config

    g = torch.Generator().manual_seed(SEED + 1)
    config = Qwen2Config(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                         num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                         max_position_embeddings=a.max_positions, tie_word_embeddings=True, dtype="bfloat16",
                         bos_token_id=1, eos_token_id=1)
    tensors = _decoder(g, a, _dense_mlp(g, a))
    head_dim = a.hidden // a.heads
    for i in range(a.layers):
        p = f"model.layers.{i}.self_attn."
        tensors[p + "q_proj.bias"] = _normal(g, a.heads * head_dim)
        tensors[p + "k_proj.bias"] = _normal(g, a.kv_heads * head_dim)
        tensors[p + "v_proj.bias"] = _normal(g, a.kv_heads * head_dim)
    _save(directory, config, tensors)


def moe(directory, a, experts=4):
    from transformers import MixtralConfig

    g = torch.Generator().manual_seed(SEED + 2)
    config = MixtralConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                           num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                           max_position_embeddings=a.max_positions, num_local_experts=experts,
                           num_experts_per_tok=2, tie_word_embeddings=False, dtype="bfloat16",
                           # Without it vLLM takes a config of model_type mixtral for a pooling model.
                           architectures=["MixtralForCausalLM"],
                           bos_token_id=1, eos_token_id=1)

    def mlp(i):
        t = {"block_sparse_moe.gate.weight": _normal(g, experts, a.hidden, scale=0.5)}
        for e in range(experts):
            t[f"block_sparse_moe.experts.{e}.w1.weight"] = _normal(g, a.intermediate, a.hidden)
            t[f"block_sparse_moe.experts.{e}.w2.weight"] = _normal(g, a.hidden, a.intermediate)
            t[f"block_sparse_moe.experts.{e}.w3.weight"] = _normal(g, a.intermediate, a.hidden)
        return t

    tensors = _decoder(g, a, mlp)
    tensors["lm_head.weight"] = _normal(g, a.vocab, a.hidden)
    _save(directory, config, tensors)


# compressed-tensors' description of W8A8 INT8 as its tools write it: symmetric int8 weights with
# one scale per output channel, int8 activations quantized per token at run time.
W8A8_QUANTIZATION = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "ignore": ["lm_head"],
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False,
                        "observer": "minmax"},
            "input_activations": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
                                  "dynamic": True, "observer": None},
        }
    },
}
_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
            "mlp.up_proj", "mlp.down_proj")


def w8a8(directory, a):
    """A dense Llama's weights, each linear layer's quantized to int8 per output channel."""
    config, tensors = _llama(SEED + 3, a)
    for i in range(a.layers):
        for linear in _LINEARS:
            name = f"model.layers.{i}.{linear}"
            w = tensors[name + ".weight"].float()
            scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
            tensors[name + ".weight"] = torch.round(w / scale).clamp(-127, 127).to(torch.int8)
            tensors[name + ".weight_scale"] = scale.to(torch.float32)
    _save(directory, config, tensors, quantization=W8A8_QUANTIZATION)


WRITERS = {"llama": llama, "tied": tied, "moe": moe, "w8a8": w8a8}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory")
    parser.add_argument("names", nargs="*", default=sorted(WRITERS))
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--intermediate", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--max-positions", type=int, default=512)
    a = parser.parse_args()
    for name in a.names:
        target = os.path.join(a.directory, name)
        WRITERS[name](target, a)
        _word_level_tokenizer(a.vocab, eos_token="</s>").save_pretrained(target)  # prompts: "the red fox"
        print(target)


if __name__ == "__main__":
    main()

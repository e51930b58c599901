"""Small real models of the frameworks, built from their own config classes (random weights, fixed
seeds) and saved with save_pretrained, with fixed inputs to run them on: what the framework tests
load (test_transformers.py, test_diffusers.py, bench/first_output_bench.py).

    python framework_models.py transformers|diffusers DIR   # saves every model under DIR/<name>
"""

import json
import os
import sys
from typing import Any

import torch

# name: (model class, config class, config, save dtype, max shard size or None, load keywords)
# Each is a real architecture's code at a small size: rotary decoders (Llama sharded in bf16, Qwen2 with
# tied embeddings), an encoder-decoder's encoder in fp16 (T5: `wo` kept in fp32), a CLIP text model,
# BERT and ViT (position_ids / token_type_ids buffers), and Whisper (its encoder's sinusoidal positions
# a parameter its constructor freezes, requires_grad=False, which from_pretrained's loading makes
# trainable again).
TRANSFORMERS_MODELS: "dict[str, tuple[str, str, dict[str, Any], torch.dtype, str | None, dict[str, Any]]]" = {
    "llama": ("LlamaForCausalLM", "LlamaConfig",
              dict(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                   num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                   tie_word_embeddings=False),
              torch.bfloat16, "3MB", {}),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config",
              dict(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                   num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                   tie_word_embeddings=True),
              torch.float32, "4MB", {"attn_implementation": "eager"}),
    "t5-encoder": ("T5EncoderModel", "T5Config",
                   dict(vocab_size=4096, d_model=256, d_kv=32, d_ff=512, num_layers=3, num_heads=8,
                        feed_forward_proj="gated-gelu"),
                   torch.float16, None, {}),
    "clip-text": ("CLIPTextModel", "CLIPTextConfig",
                  dict(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                       num_attention_heads=8, max_position_embeddings=77, bos_token_id=0, eos_token_id=2,
                       pad_token_id=1),
                  torch.float32, None, {}),
    "bert": ("BertModel", "BertConfig",
             dict(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                  num_attention_heads=8, max_position_embeddings=128),
             torch.float32, "2MB", {}),
    "vit": ("ViTModel", "ViTConfig",
            dict(image_size=64, patch_size=8, hidden_size=192, intermediate_size=384, num_hidden_layers=3,
                 num_attention_heads=6),
            torch.float32, None, {}),
    "whisper": ("WhisperForConditionalGeneration", "WhisperConfig",
                dict(vocab_size=256, num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                     decoder_layers=2, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                     max_source_positions=16, max_target_positions=32, pad_token_id=1, bos_token_id=2,
                     eos_token_id=3, decoder_start_token_id=2),
                torch.float32, None, {}),
}

INPUT_IDS = torch.tensor([[1, 15, 27, 311, 4000, 9, 2, 0], [1, 100, 200, 300, 400, 500, 600, 2]])


def transformers_inputs(name):
    """The forward keywords each model runs on (the same in every process)."""
    if name == "vit":
        generator = torch.Generator().manual_seed(7)
        return {"pixel_values": torch.randn(2, 3, 64, 64, generator=generator)}
    if name == "whisper":  # 16 mel bins, twice the encoder's 16 positions; a few decoder tokens
        generator = torch.Generator().manual_seed(8)
        return {"input_features": torch.randn(2, 16, 32, generator=generator),
                "decoder_input_ids": torch.tensor([[2, 15, 27, 31], [2, 100, 200, 3]])}
    return {"input_ids": INPUT_IDS, "attention_mask": (INPUT_IDS != 0).long()}


def transformers_outputs(model, name, device):
    """The forward outputs of `model` on the fixed inputs, on the CPU."""
    inputs = {k: v.to(device) for k, v in transformers_inputs(name).items()}
    if "pixel_values" in inputs:
        inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
    with torch.no_grad():
        out = model(**inputs)
    return {k: v.cpu() for k, v in out.items() if isinstance(v, torch.Tensor)}


def transformers_class(name: str) -> Any:
    import transformers

    return getattr(transformers, TRANSFORMERS_MODELS[name][0])


def save_transformers(root):
    import transformers

    for index, (name, (model_name, config_name, fields, dtype, shard, _)) in enumerate(TRANSFORMERS_MODELS.items()):
        torch.manual_seed(index)
        config = getattr(transformers, config_name)(**fields)
        model = getattr(transformers, model_name)(config).to(dtype)
        model.save_pretrained(os.path.join(root, name), **({"max_shard_size": shard} if shard else {}))


# --- diffusers ------------------------------------------------------------------------------------

PROMPT = "a red fox in the snow"


def _word_level_tokenizer(vocab_size, **special):
    """A small word-level fast tokenizer (no download): every lowercase word of a fixed list, the
    special tokens, and [UNK]."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "</s>", "<unk>", "<|startoftext|>", "<|endoftext|>"]
    words += "a an the red fox in snow cat dog blue green sky sea over under tree house".split()
    words += [f"w{i}" for i in range(vocab_size - len(words))]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", **special)


def save_diffusers(root):
    import diffusers
    import transformers

    # Wan (text to video): UMT5 encoder, the Wan transformer (25 tensors kept in fp32), the Wan VAE.
    torch.manual_seed(10)
    t5 = transformers.UMT5Config(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                                 feed_forward_proj="gated-gelu")
    wan = diffusers.WanPipeline(
        tokenizer=_word_level_tokenizer(256, pad_token="<pad>", eos_token="</s>", model_max_length=512),
        text_encoder=transformers.UMT5EncoderModel(t5).to(torch.bfloat16),
        transformer=diffusers.WanTransformer3DModel(
            patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=32, in_channels=4, out_channels=4,
            text_dim=64, freq_dim=64, ffn_dim=512, num_layers=3, rope_max_seq_len=32,
        ),
        vae=diffusers.AutoencoderKLWan(base_dim=8, z_dim=4, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                                       temperal_downsample=[False, True, True], latents_mean=[0.0] * 4,
                                       latents_std=[1.0] * 4),
        scheduler=diffusers.UniPCMultistepScheduler(flow_shift=3.0, prediction_type="flow_prediction",
                                                    use_flow_sigmas=True),
    )
    wan.save_pretrained(os.path.join(root, "wan"), max_shard_size="1MB")  # the transformer in 3 shards

    # Flux (text to image): CLIP text, T5 encoder, the Flux transformer, an image VAE.
    torch.manual_seed(11)
    flux = diffusers.FluxPipeline(
        tokenizer=_word_level_tokenizer(256, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                                        pad_token="<|endoftext|>", model_max_length=77),
        text_encoder=transformers.CLIPTextModel(transformers.CLIPTextConfig(
            vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=77, projection_dim=32, bos_token_id=3, eos_token_id=4, pad_token_id=4)),
        tokenizer_2=_word_level_tokenizer(256, pad_token="<pad>", eos_token="</s>", model_max_length=512),
        text_encoder_2=transformers.T5EncoderModel(transformers.T5Config(
            vocab_size=256, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)),
        transformer=diffusers.FluxTransformer2DModel(
            patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=[4, 4, 8]),
        vae=diffusers.AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 32),
                                    down_block_types=("DownEncoderBlock2D",) * 2,
                                    up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1,
                                    norm_num_groups=8, sample_size=32, use_quant_conv=False,
                                    use_post_quant_conv=False, shift_factor=0.0, scaling_factor=1.0),
        scheduler=diffusers.FlowMatchEulerDiscreteScheduler(),
    )
    flux.save_pretrained(os.path.join(root, "flux"))


DIFFUSERS_PIPELINES: "dict[str, tuple[str, torch.dtype, dict[str, Any]]]" = {
    "wan": ("WanPipeline", torch.bfloat16,
            dict(height=32, width=32, num_frames=5, guidance_scale=1.0, max_sequence_length=16)),
    "flux": ("FluxPipeline", torch.float32,
             dict(height=32, width=32, guidance_scale=3.5, max_sequence_length=16)),
}


def pipeline_class(name: str) -> Any:
    import diffusers

    return getattr(diffusers, DIFFUSERS_PIPELINES[name][0])


def pipeline_outputs(pipe, name, device):
    """The latents after two denoising steps (fixed seed) and their decoded output, on the CPU."""
    _, _, call = DIFFUSERS_PIPELINES[name]
    steps = {}

    def keep_latents(pipeline, step, timestep, values):
        steps[step] = values["latents"].detach().cpu().clone()
        return values

    generator = torch.Generator(device="cpu").manual_seed(1234)
    with torch.no_grad():
        out = pipe(PROMPT, num_inference_steps=2, generator=generator, output_type="pt",
                   callback_on_step_end=keep_latents, callback_on_step_end_tensor_inputs=["latents"], **call)
    decoded = out.frames if hasattr(out, "frames") else out.images
    return {"latents": steps[max(steps)], "decoded": torch.as_tensor(decoded).cpu()}


if __name__ == "__main__":
    kind, root = sys.argv[1], sys.argv[2]
    {"transformers": save_transformers, "diffusers": save_diffusers}[kind](root)
    print(json.dumps(sorted(os.listdir(root))))

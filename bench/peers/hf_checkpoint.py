"""What both PyTorch peers read from a Hugging Face checkpoint folder: config.json, the
safetensors shards and the RoPE inverse frequencies (HF's formulas, scalings included)."""

import json
import math
import os

import torch


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM config inside
        cfg = {**cfg, **cfg["text_config"]}
    return cfg


def load_state_dict(model_dir, device):
    from safetensors.torch import load_file

    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    state = {}
    for shard in shards:
        state.update(load_file(os.path.join(model_dir, shard), device=device))
    return state


def rope_inv_freq(cfg, head_dim):
    """HF's inverse frequencies, with the 'llama3' and 'linear' scalings computed the same way.
    Reads the classic fields (rope_theta, rope_scaling) or transformers 5's rope_parameters."""
    params = cfg.get("rope_parameters")
    scaling = params if isinstance(params, dict) else (cfg.get("rope_scaling") or {})
    theta = float(scaling.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    partial = scaling.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    rotary_dim = int(head_dim * float(partial))
    inv = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim))
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        inv = inv / float(scaling["factor"])
    elif kind == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(scaling["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    elif kind not in ("default", None):
        raise ValueError(f"rope_scaling type '{kind}' is not supported")
    return inv

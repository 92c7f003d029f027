"""A BERT sentence encoder in plain torch, read from the model's safetensors: what the torch
variant runs for the models it fits (MiniLM, the default, among them; docs/decisions/0302).

``import sentence_transformers`` pulls in transformers, scikit-learn, scipy and more: about
5 CPU-seconds and hundreds of megabytes in every process that loads the model, for a six-layer
encoder that is a few matrix products. This module is that encoder and nothing else: the
same weights, the same arithmetic as ``BertModel`` with SDPA attention followed by
sentence-transformers' pooling and normalisation, so the vectors are the same (tested against
sentence-transformers' own output). A model it does not fit (another architecture, another
pooling, a dense head) is refused by ``fits`` and loaded through sentence-transformers as before.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

# What this module implements of a model directory's files; anything else goes the long way.
_MODULES = ("Transformer", "Pooling", "Normalize")
_POOLINGS = ("pooling_mode_mean_tokens", "pooling_mode_cls_token")


def fits(path: pathlib.Path) -> bool:
    """Whether the model in ``path`` is a BERT encoder with mean or CLS pooling and
    safetensors weights: the models this module runs exactly."""
    try:
        config = json.loads((path / "config.json").read_text())
        modules = json.loads((path / "modules.json").read_text())
        kinds = tuple(m["type"].rsplit(".", 1)[-1] for m in modules)
        pooling_dir = next(m["path"] for m in modules if m["type"].endswith(".Pooling"))
        pooling = json.loads((path / pooling_dir / "config.json").read_text())
    except (OSError, ValueError, KeyError, StopIteration):
        return False
    chosen = [mode for mode, on in pooling.items() if mode.startswith("pooling_mode") and on]
    return (config.get("model_type") == "bert"
            and config.get("hidden_act") == "gelu"
            and config.get("position_embedding_type", "absolute") == "absolute"
            and kinds in (_MODULES, _MODULES[:2])
            and len(chosen) == 1 and chosen[0] in _POOLINGS
            and (path / "model.safetensors").is_file())


class Encoder:
    """The encoder's weights as tensors on one device, and its forward pass. Called like a
    SentenceTransformer: ``encoder({"input_ids": ..., "attention_mask": ...})`` gives
    ``{"sentence_embedding": ...}``, so the torch backend's GPU staging feeds either."""

    def __init__(self, path: pathlib.Path, device: str = "cpu") -> None:
        import torch
        from safetensors.torch import load_file

        self.torch = torch
        config = json.loads((path / "config.json").read_text())
        modules = json.loads((path / "modules.json").read_text())
        pooling_dir = next(m["path"] for m in modules if m["type"].endswith(".Pooling"))
        pooling = json.loads((path / pooling_dir / "config.json").read_text())
        self.mean = bool(pooling.get("pooling_mode_mean_tokens"))
        self.normalize = any(m["type"].endswith(".Normalize") for m in modules)
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        w = load_file(str(path / "model.safetensors"), device=device)
        w = {k.removeprefix("bert."): v for k, v in w.items()}
        self.embed = (w["embeddings.word_embeddings.weight"],
                      w["embeddings.position_embeddings.weight"],
                      # Every sequence is one segment: token type 0, as BERT's default buffer.
                      w["embeddings.token_type_embeddings.weight"][0],
                      w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for n in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{n}."
            attention = p + "attention.self."
            self.layers.append((
                # Query, key and value in one product: one launch instead of three.
                torch.cat([w[attention + x + ".weight"] for x in ("query", "key", "value")]),
                torch.cat([w[attention + x + ".bias"] for x in ("query", "key", "value")]),
                w[p + "attention.output.dense.weight"], w[p + "attention.output.dense.bias"],
                w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"],
                w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"],
                w[p + "output.dense.weight"], w[p + "output.dense.bias"],
                w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]))

    def half(self) -> Encoder:
        """fp16 weights (a GPU's passes)."""
        def cast(t: Any) -> Any:
            return t.half() if t.is_floating_point() else t

        self.embed = tuple(cast(t) for t in self.embed)
        self.layers = [tuple(cast(t) for t in layer) for layer in self.layers]
        return self

    def eval(self) -> Encoder:
        return self  # no dropout here to switch off

    def __call__(self, features: dict[str, Any]) -> dict[str, Any]:
        with self.torch.inference_mode():
            return {"sentence_embedding": self.forward(features["input_ids"],
                                                       features["attention_mask"])}

    def forward(self, ids: Any, mask: Any) -> Any:
        torch = self.torch
        f = torch.nn.functional
        words, positions, segment, ln_w, ln_b = self.embed
        rows, width = ids.shape
        hidden = words.shape[1]
        x = f.embedding(ids, words) + (positions[:width] + segment)
        x = f.layer_norm(x, (hidden,), ln_w, ln_b, self.eps)
        # Padding masked out as BertModel's SDPA path does: the dtype's lowest value added.
        keep = mask.to(torch.bool)
        bias = torch.zeros((rows, 1, 1, width), dtype=x.dtype, device=x.device)
        bias.masked_fill_(~keep[:, None, None, :], torch.finfo(x.dtype).min)
        head = hidden // self.heads
        for (qkv_w, qkv_b, out_w, out_b, ln1_w, ln1_b, in_w, in_b, down_w, down_b,
             ln2_w, ln2_b) in self.layers:
            q, k, v = (f.linear(x, qkv_w, qkv_b).view(rows, width, 3, self.heads, head)
                       .permute(2, 0, 3, 1, 4))
            attended = f.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            attended = attended.transpose(1, 2).reshape(rows, width, hidden)
            x = f.layer_norm(f.linear(attended, out_w, out_b) + x, (hidden,), ln1_w, ln1_b,
                             self.eps)
            inner = f.gelu(f.linear(x, in_w, in_b))
            x = f.layer_norm(f.linear(inner, down_w, down_b) + x, (hidden,), ln2_w, ln2_b,
                             self.eps)
        if self.mean:
            weights = keep.unsqueeze(-1).to(x.dtype)
            pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        else:
            pooled = x[:, 0]
        return f.normalize(pooled, p=2, dim=1) if self.normalize else pooled

"""Model presets: the attention shape of well-known models, so a user asks for "Llama 3 8B at 32k"
instead of remembering that it has 32 query heads sharing 8 K/V heads of dimension 128.

A preset fixes only what does not depend on how the model is served: query heads, K/V heads
(GQA/MQA) and head dimension of its attention layers. Batch, context length, pass and dtype
stay the user's. Every shape below is copied from the model's published configuration, cited
beside it; none is derived or rounded.

A model whose layers attend over a sliding window carries it (`window`, with its source): its
attention is causal by definition (position i attends to positions i - W .. i, Mistral 7B's
paper, Section 2), so the preset sets causal and window_left = W once the context is longer
than W (at or below W the window hides nothing and the preset sets neither). Models that
alternate local (windowed) and global layers, such as Gemma 2, are not among the presets: one
problem here is one layer, and no per-model total over layers is computed.

A model with multi-head latent attention (MLA: DeepSeek-V2 and V3) is given in the absorbed
form its decode kernels run (FlashMLA's "MQA mode": head_dim_k 576 with head_dim_v 512, its
README's support matrix): every query head reads one shared latent row per token of
kv_lora_rank + qk_rope_head_dim columns, so kv_heads is 1, head_dim is that width, head_dim_v
is kv_lora_rank and latent_kv is set (V is the row's first kv_lora_rank columns). The
per-head qk_nope_head_dim and v_head_dim of the config are absorbed into the query and output
projections and appear nowhere in the attention's shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class Model:
    """One model's attention layer shape (every layer has the same one in these models)."""

    name: str
    heads: int  # query heads
    kv_heads: int  # K/V heads: = heads for multi-head attention, fewer for GQA, 1 for MQA
    head_dim: int
    layers: int  # attention layers per forward pass (for per-token or per-step totals)
    source: str  # where the numbers come from
    window: int | None = None  # sliding window W (keys before the query), None: full attention
    window_source: str = ""  # where the window comes from
    head_dim_v: int | None = None  # V's head dim when not head_dim (MLA absorbed: kv_lora_rank)
    latent_kv: bool = False  # MLA: V is the first head_dim_v columns of K's latent row

    def shape(self) -> dict:
        """The Problem fields this preset sets whatever the context: the layer's shape (with
        head_dim_v and latent_kv for an MLA model)."""
        shape = {"heads": self.heads, "kv_heads": self.kv_heads, "head_dim": self.head_dim}
        if self.latent_kv or self.head_dim_v is not None:
            shape.update(head_dim_v=self.head_dim_v, latent_kv=self.latent_kv)
        return shape

    def latent_note(self) -> str:
        """One line on an MLA preset's absorbed shape, or "" for a model without one."""
        if not self.latent_kv:
            return ""
        return (
            f"{self.name}: multi-head latent attention, absorbed: {self.heads} query heads "
            f"read one latent row of {self.head_dim} columns per token (kv_lora_rank "
            f"{self.head_dim_v} + rope {self.head_dim - self.head_dim_v}), V its first "
            f"{self.head_dim_v} ({self.source})"
        )

    def attention(self, seq_k: int) -> dict:
        """The mask fields this preset sets at a context of seq_k keys: causal with
        window_left = W for a windowed model whose window is shorter than the context,
        nothing otherwise."""
        if self.window is None or self.window >= seq_k:
            return {}
        return {"causal": True, "window_left": self.window}

    def window_note(self, seq_k: int) -> str:
        """One line on the preset's window at this context, or "" for a model without one."""
        if self.window is None:
            return ""
        where = f"{self.name}: sliding window of {self.window:,} keys ({self.window_source})"
        if self.window >= seq_k:
            return f"{where}; the context ({seq_k:,} keys) fits in it, so no key is hidden"
        return f"{where}: causal, window_left {self.window:,}"


_HF = "Hugging Face config.json of"

MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        # n_embd 1024, n_head 16, n_layer 24
        Model("gpt2-medium", 16, 16, 64, 24, f"{_HF} openai-community/gpt2-medium"),
        # n_embd 1600, n_head 25, n_layer 48
        Model("gpt2-xl", 25, 25, 64, 48, f"{_HF} openai-community/gpt2-xl"),
        # d_model 12288, n_heads 96, d_head 128, n_layers 96
        Model("gpt3-175b", 96, 96, 128, 96, "Brown et al. 2020, arXiv:2005.14165, Table 2.1"),
        # hidden 4096, 32 heads (multi-head), 32 layers
        Model("llama-2-7b", 32, 32, 128, 32, f"{_HF} meta-llama/Llama-2-7b-hf"),
        # hidden 8192, 64 heads, 8 key/value heads, 80 layers
        Model("llama-2-70b", 64, 8, 128, 80, f"{_HF} meta-llama/Llama-2-70b-hf"),
        # hidden 4096, 32 heads, 8 key/value heads, 32 layers
        Model("llama-3-8b", 32, 8, 128, 32, f"{_HF} meta-llama/Meta-Llama-3-8B"),
        # hidden 8192, 64 heads, 8 key/value heads, 80 layers
        Model("llama-3-70b", 64, 8, 128, 80, f"{_HF} meta-llama/Meta-Llama-3-70B"),
        # hidden 16384, 128 heads, 8 key/value heads, 126 layers
        Model("llama-3.1-405b", 128, 8, 128, 126, f"{_HF} meta-llama/Llama-3.1-405B"),
        # dim 4096, n_heads 32, n_kv_heads 8, head_dim 128, n_layers 32
        # window_size 4096 (Table 1); "h_i attends to positions between i - W and i" (Sec. 2);
        # sliding_window 4096 in the Hugging Face config.json of mistralai/Mistral-7B-v0.1
        Model(
            "mistral-7b",
            32,
            8,
            128,
            32,
            "Jiang et al. 2023, arXiv:2310.06825, Table 1",
            window=4096,
            window_source="Jiang et al. 2023, arXiv:2310.06825, Section 2 and Table 1",
        ),
        # the same attention shape as Mistral 7B (the experts are in the feed-forward layers),
        # without its sliding window: "a fully dense context length of 32k tokens" (Section 2)
        Model("mixtral-8x7b", 32, 8, 128, 32, "Jiang et al. 2024, arXiv:2401.04088, Table 1"),
        # hidden 3584, 28 query heads, 4 key/value heads, 28 layers
        Model("qwen2-7b", 28, 4, 128, 28, "Yang et al. 2024, arXiv:2407.10671, Table 1"),
        # hidden 8192, 64 query heads, 8 key/value heads, 80 layers
        Model("qwen2-72b", 64, 8, 128, 80, "Yang et al. 2024, arXiv:2407.10671, Table 1"),
        # d_model 2048, 8 heads, 1 key/value head (multi-query), head size 256, 18 layers
        Model("gemma-2b", 8, 1, 256, 18, "Gemma Team 2024, arXiv:2403.08295, Table 1"),
        # d_model 3072, 16 heads, 16 key/value heads, head size 256, 28 layers
        Model("gemma-7b", 16, 16, 256, 28, "Gemma Team 2024, arXiv:2403.08295, Table 1"),
        # hidden 3072, 32 heads (multi-head), 32 layers: head dim 96
        Model("phi-3-mini", 32, 32, 96, 32, f"{_HF} microsoft/Phi-3-mini-4k-instruct"),
        # MLA as Section 2.1 defines it, with Section 3.1.2's hyper-parameters: 60 layers,
        # n_h 128 heads, d_c 512, d_h^R 64 (d_h 128 is absorbed); in the Hugging Face
        # config.json of deepseek-ai/DeepSeek-V2: num_attention_heads 128, kv_lora_rank 512,
        # qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128, num_hidden_layers 60.
        # Absorbed: one latent row of 512 + 64 = 576 columns for all heads, V its first 512.
        Model(
            "deepseek-v2",
            128,
            1,
            576,
            60,
            "DeepSeek-AI 2024, arXiv:2405.04434, Sections 2.1 and 3.1.2",
            head_dim_v=512,
            latent_kv=True,
        ),
        # arXiv:2405.04434 Appendix B.1: 27 layers, 16 heads, KV compression 512, queries
        # not compressed, decoupled key 64; config.json: num_attention_heads 16,
        # kv_lora_rank 512, qk_rope_head_dim 64, q_lora_rank null, num_hidden_layers 27
        Model(
            "deepseek-v2-lite",
            16,
            1,
            576,
            27,
            "DeepSeek-AI 2024, arXiv:2405.04434, Appendix B.1",
            head_dim_v=512,
            latent_kv=True,
        ),
        # Section 4.2's hyper-parameters: 61 layers, n_h 128 heads, d_c 512, d_h^R 64 (MLA
        # as in DeepSeek-V2, Section 2.1.1); config.json of deepseek-ai/DeepSeek-V3:
        # num_attention_heads 128, kv_lora_rank 512, qk_rope_head_dim 64, num_hidden_layers 61
        Model(
            "deepseek-v3",
            128,
            1,
            576,
            61,
            "DeepSeek-AI 2024, arXiv:2412.19437, Section 4.2",
            head_dim_v=512,
            latent_kv=True,
        ),
    )
}


def get_model(name: str) -> Model:
    """A preset by name; an unknown name lists the presets."""
    try:
        return MODELS[name]
    except KeyError:
        raise ConfigError(
            "model", f"unknown model {str(name)[:40]!r}; choose one of {', '.join(MODELS)}"
        ) from None

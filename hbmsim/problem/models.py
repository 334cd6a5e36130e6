"""Model presets: the attention shape of well-known models, so a user asks for "Llama 3 8B at 32k"
instead of remembering that it has 32 query heads sharing 8 K/V heads of dimension 128.

A preset fixes only what does not depend on how the model is served: query heads, K/V heads
(GQA/MQA) and head dimension of its attention layers. Batch, context length, pass and dtype
stay the user's. Every shape below is copied from the model's published configuration, cited
beside it; none is derived or rounded.

A model whose layers attend over a sliding window carries it (`window`, with its source): its
attention is causal by definition (position i attends to positions i - W .. i, Mistral 7B's
paper, Section 2), so the preset sets causal and window_left = W once the context is longer
than W (at or below W the window hides nothing and the preset sets neither).

A model that alternates local (sliding-window) and global layers, Gemma 2, carries its local
window (`local_window`) and which layers are local (`local_first`: layer 0 is local, then they
alternate); `layer_kinds` gives each kind of layer with how many layers have it and the mask it
sets at a context, so that a caller simulates one layer of each kind and adds them up into a
per-model total. Every model answers `layer_kinds` (a model with one kind: all its layers), so
every preset gives a per-model total. What a model's attention does beyond the tile programs
(Gemma 2's logit soft-cap, a tanh per score) is carried with its source so the output can say
that it is not counted, rather than dropping it silently.

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
class LayerKind:
    """One kind of attention layer of a model: how many of its layers have it and the mask
    fields it sets at a context (empty: the user's mask as given)."""

    kind: str  # "local", "global", or "layer" for a model whose layers are all alike
    layers: int
    mask: dict


@dataclass(frozen=True)
class Model:
    """One model's attention layer shape, and which layers attend locally when they differ."""

    name: str
    heads: int  # query heads
    kv_heads: int  # K/V heads: = heads for multi-head attention, fewer for GQA, 1 for MQA
    head_dim: int
    layers: int  # attention layers per forward pass (for per-token or per-step totals)
    source: str  # where the numbers come from
    window: int | None = None  # sliding window W (keys before the query), None: full attention
    window_source: str = ""  # where the window comes from
    # alternating local/global layers: a local layer's window W counts the query itself, so
    # query i sees keys i - W + 1 .. i (window_left = W - 1); None: no alternation
    local_window: int | None = None
    local_first: bool = True  # layer 0 is local, layer 1 global, and so on
    layers_source: str = ""  # where the window and the alternation come from
    query_scale: float | None = None  # softmax scale; None: 1/sqrt(head_dim)
    query_scale_source: str = ""
    softcap: float | None = None  # logit soft-cap c: score -> c * tanh(score / c)
    softcap_source: str = ""
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

    @property
    def alternating(self) -> bool:
        """Whether its layers alternate local (windowed) and global attention."""
        return self.local_window is not None

    def scale(self) -> dict:
        """The softmax scale this preset sets ({} when it is the default 1/sqrt(head_dim))."""
        return {} if self.query_scale is None else {"softmax_scale": self.query_scale}

    def attention(self, seq_k: int) -> dict:
        """The mask fields this preset sets at a context of seq_k keys: causal with
        window_left = W for a windowed model whose window is shorter than the context,
        nothing otherwise. For an alternating model these are its global layers' (nothing):
        `layer_kinds` has the local ones."""
        if self.window is None or self.window >= seq_k:
            return {}
        return {"causal": True, "window_left": self.window}

    def layer_kinds(self, seq_k: int) -> list[LayerKind]:
        """Each kind of layer with its count and mask at seq_k keys, local first. A local
        layer is causal with window_left = W - 1 once the context is longer than W; at or
        below W its window hides nothing and it sets no mask."""
        if not self.alternating:
            return [LayerKind("layer", self.layers, self.attention(seq_k))]
        W = self.local_window
        local = (self.layers + 1) // 2 if self.local_first else self.layers // 2
        mask = {} if seq_k <= W else {"causal": True, "window_left": W - 1}
        return [
            LayerKind("local", local, mask),
            LayerKind("global", self.layers - local, {}),
        ]

    def layers_note(self) -> str:
        """One line on which layers are local and which global ("" for a model without)."""
        if not self.alternating:
            return ""
        kinds = ("local", "global") if self.local_first else ("global", "local")
        return (
            f"{self.name}: {self.layers} layers alternate local (sliding window of "
            f"{self.local_window:,} keys, the query included) and global attention, starting "
            f"with {kinds[0]} ({self.layers_source})"
        )

    def softcap_note(self) -> str:
        """One line saying that the logit soft-cap is not counted ("" for a model without)."""
        if self.softcap is None:
            return ""
        return (
            f"{self.name} soft-caps its attention logits at {self.softcap:g} (c * tanh(s / c) "
            f"per score, {self.softcap_source}; flash-attn's softcap since 2.6): not counted, "
            "the tile programs have no soft-cap"
        )

    def window_note(self, seq_k: int) -> str:
        """One line on the preset's window at this context, or "" for a model without one."""
        if self.window is None:
            return ""
        where = f"{self.name}: sliding window of {self.window:,} keys ({self.window_source})"
        if self.window >= seq_k:
            return f"{where}; the context ({seq_k:,} keys) fits in it, so no key is hidden"
        return f"{where}: causal, window_left {self.window:,}"


_HF = "Hugging Face config.json of"
# layer i is local when i is even (transformers' Gemma2DecoderLayer: is_sliding = not
# bool(layer_idx % 2)); a local query i sees keys i - W + 1 .. i (google-deepmind/gemma,
# gemma/modules.py, _create_sliding_mask: key position > query position - W)
_GEMMA2_LAYERS = (
    "Gemma Team 2024, arXiv:2408.00118, Section 2; layer 0 local: transformers' "
    "modeling_gemma2.py; window: google-deepmind/gemma, gemma/modules.py"
)

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
        # Gemma 2: d_model 2304 / 3584 / 4608, layers 26 / 42 / 46, heads 8 / 16 / 32, KV heads
        # 4 / 8 / 16, head size 256 / 256 / 128, sliding window 4096 (Table 1); local and
        # global layers alternate (Section 2). The same numbers are in the Hugging Face
        # config.json of google/gemma-2-2b, -9b, -27b (hidden_size, num_hidden_layers,
        # num_attention_heads, num_key_value_heads, head_dim, sliding_window 4096), with
        # attn_logit_softcapping 50.0 and query_pre_attn_scalar 256 / 256 / 144.
        *(
            Model(
                f"gemma-2-{size}",
                heads,
                kv_heads,
                head_dim,
                layers,
                "Gemma Team 2024, arXiv:2408.00118, Table 1",
                local_window=4096,
                local_first=True,
                layers_source=_GEMMA2_LAYERS,
                query_scale=scalar**-0.5,
                query_scale_source=f"query_pre_attn_scalar {scalar}: {_HF} google/gemma-2-{size}",
                softcap=50.0,
                softcap_source="Gemma Team 2024, arXiv:2408.00118, Section 2",
            )
            for size, heads, kv_heads, head_dim, layers, scalar in (
                ("2b", 8, 4, 256, 26, 256),
                ("9b", 16, 8, 256, 42, 256),
                ("27b", 32, 16, 128, 46, 144),
            )
        ),
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

"""Language models: GPT pretraining from scratch (``llm/gpt``) and LoRA fine-tuning (``llm/lora``).

The metric is validation bits per byte over a fixed number of validation bytes, so runs with different
tokenizers and vocabularies compare.

- ``data.py``: text files, folders and datasets with their validation split, the byte-level BPE tokenizer and
  its byte-length table, packed token windows, bits per byte, and prompt/response JSONL;
- ``models.py``: the GPT (RoPE, QK-norm, ReLU^2 or SwiGLU, soft-capped logits) and the loader of a
  ``transformers`` causal LM;
- ``gpt.py``: ``llm/gpt``, pretraining sized by the budget with the Muon+AdamW table;
- ``lora.py``: ``llm/lora``, LoRA on a ``transformers`` model, on text or on prompt/response JSONL.
"""

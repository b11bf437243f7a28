"""Language models: GPT pretraining from scratch (``llm/gpt``) and LoRA fine-tuning (``llm/lora``).

The metric is test bits per byte over a fixed number of test bytes, scored once after training (validation
bits per byte is what training watches), so runs with different tokenizers and vocabularies compare. Text
is cut in reading order (train, then validation, then the test tail, or the data's own held-out part as
test); prompt/response JSONL by a hash of each example's content.

- ``textfiles.py``: what a text source holds (its documents, its held-out part) and UTF-8 files read whole or in
  blocks, with the same one-line errors;
- ``data.py``: text cut into train, validation and test, the byte-level BPE tokenizer and its byte-length table,
  packed token windows, bits per byte, and prompt/response JSONL;
- ``shards.py``: token shards tokenized once (``zoo data prepare llm/gpt``, ``stream=true``), exactly the tokens
  memory holds, and what ``llm/gpt`` trains on from either;
- ``models.py``: the GPT (RoPE, QK-norm, ReLU^2 or SwiGLU, soft-capped logits) and the loader of a
  ``transformers`` causal LM;
- ``gpt.py``: ``llm/gpt``, pretraining sized by the budget with the Muon+AdamW table;
- ``lora.py``: ``llm/lora``, LoRA on a ``transformers`` model, on text or on prompt/response JSONL;
- ``infer.py``: what both use for ``zoo predict``: the options, prompts, text to score in chunks with progress,
  and the rows of ``predictions.csv`` (scored windows or examples, generated samples).
"""

"""Language models: GPT pretraining from scratch (``llm/gpt``) and LoRA fine-tuning (``llm/lora``).

The metric is test bits per byte over a fixed number of test bytes, scored once after training (validation
bits per byte is what training watches), so runs with different tokenizers and vocabularies compare. Text
is cut in reading order (train, then validation, then the test tail, or the data's own held-out part as
test); prompt/response JSONL by a hash of each example's content.

- ``datasets.py``: the text datasets the recipes are measured on (``debian_docs.py`` builds one from Debian packages);
- ``textfiles.py``: what a text source holds (its documents, its held-out part) and UTF-8 files read whole or in
  blocks, with the same one-line errors;
- ``text_splits.py``: text cut into train, validation and test, and the text each part is scored on;
- ``tokenization.py``: the byte-level BPE tokenizer, its byte-length table, documents encoded into one stream;
- ``token_windows.py``: the (input, target) windows training draws from a token stream;
- ``scoring.py``: bits per byte over scored windows (each window's sums, the total, the bootstrap interval);
- ``prompt_response.py``: prompt/response JSONL for fine-tuning, split by a hash of each example's content;
- ``shards.py``: token shards tokenized once (``zoo data prepare llm/gpt``, ``stream=true``), exactly the tokens
  memory holds, and what ``llm/gpt`` trains on from either;
- ``models.py``: the GPT (RoPE, QK-norm, ReLU^2 or SwiGLU, soft-capped logits), its parameters and FLOPs per token;
- ``sizing.py``: the depth, batch and micro-batch a time budget buys on a device;
- ``causal_lm.py``: a ``transformers`` causal LM: loaded (with a finished run's adapter), sampled, scored;
- ``gpt.py``: ``llm/gpt``, pretraining sized by the budget with the Muon+AdamW table;
- ``lora.py``: ``llm/lora``, LoRA on a ``transformers`` model, on text or on prompt/response JSONL;
- ``inference.py``: what both use for ``zoo predict``: the options, prompts, text or examples to score, and the
  rows of ``predictions.csv`` (scored windows or examples, generated samples).
"""

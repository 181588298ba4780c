"""bsb.embedded: the embedded defaults, tiny Qwen3 models trained on the synthetic tasks (:mod:`.model`), and their
tokenizers (:mod:`.tokenizer`). Model code lives here, above :mod:`bsb.tasks` (docs/embedded.md)."""

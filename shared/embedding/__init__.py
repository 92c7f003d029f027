"""The embedding model, for the worker (chunks) and the gateway (queries) alike.

Both sides must embed with the same model, variant rules and tokenizer, or distances mean
nothing; so the code lives here, and neither side imports the other (docs/decisions/0230).

- ``model``: the model's facts from its files, and the ``Embedder`` that runs it on padded batches.
- ``backends``: the two variants' forward passes (torch; the int8 ONNX export, made and cached).
- ``bert``: the torch variant's encoder for BERT models, in plain torch (no sentence-transformers).
- ``batches``: ids into passes (cut by a padded-token budget, padded), for all of the above.
- ``choice``: ``EMBEDDING_VARIANT=auto``: both variants timed on a fixed sample, the faster one
  that agrees with fp32 kept, and the choice cached per machine beside the ONNX export.

Imports run one way: ``model`` → ``choice`` → ``backends`` → ``bert``, and ``batches``; nothing imports ``model``
back.
"""

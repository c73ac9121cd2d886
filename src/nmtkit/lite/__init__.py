"""Translating a checkpoint without PyTorch: the cold start of a short ``nmtkit translate``.

Importing PyTorch takes 1.4 to 2 s on a 2-core CPU, more than everything else a
one-sentence translate does (``benchmarks/cold_start.py``). For a few lines nmtkit reads the
checkpoint and runs the Transformer's inference in numpy instead:

- :mod:`.torch_file`: a ``torch.save`` file read with ``zipfile`` and a restricted unpickler
  (plain containers, float tensors and nothing else), tensors as numpy arrays;
- :mod:`.transformer`: the model's forward pass for translation (encoder, decoder step with
  key/value caches, Vaswani et al. 2017 Sec. 3), from the checkpoint's weights;
- :mod:`.search`: greedy and beam search over one sentence, the same algorithm as
  :mod:`nmtkit.decode.search` (length caps, GNMT length penalty, finished hypotheses that
  keep competing for the beam's slots, early stopping, n best, token scores).

It exists only for speed, so it is switchable (``nmtkit translate --engine torch`` or
``--no-fast`` never use it) and ``tests/test_lite.py`` checks that both give the same
translations, scores within float tolerance. What it does not do (the recurrent model,
rotary positions, forced prefixes, constraints, sampling, MBR, reranking, attention, a
checkpoint that is not plain float32) is handed to PyTorch
(:class:`nmtkit.decode.lite_translator.LiteTranslator`).

This package imports numpy, nmtkit's config and data layers, and nothing of PyTorch.
"""

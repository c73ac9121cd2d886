"""Translating a checkpoint without PyTorch: the cold start of a short ``nmtkit translate``.

Importing PyTorch takes 1.4 to 2 s on a 2-core CPU, more than everything else a
one-sentence translate does (``benchmarks/cold_start.py``). For a few lines nmtkit reads the
checkpoint and runs the Transformer's inference in numpy instead:

- :mod:`.checkpoint`: a release checkpoint (a safetensors file) read with the safetensors
  library's numpy loader and checked as PyTorch's reader checks it, weights as numpy arrays;
- :mod:`.transformer`: the model's forward pass for translation (encoder, decoder step with
  key/value caches, Vaswani et al. 2017 Sec. 3), from the checkpoint's weights;
- :mod:`.search`: greedy and beam search over one sentence, the same algorithm as
  :mod:`nmtkit.decode.search` under the same rules (:mod:`nmtkit.rules`: length caps, GNMT
  length penalty, ranking), finished hypotheses that keep competing for the beam's slots,
  early stopping, n best, token scores.

The rest is shared, not copied: the sinusoid table is :mod:`nmtkit.models.sinusoid`, the
checkpoint's marker, version and checksum :mod:`nmtkit.checkpoint_format`.

It exists only for speed, so it is switchable (``nmtkit translate --engine torch`` or
``--no-fast`` never use it) and ``tests/test_lite.py`` checks that both give the same
translations, scores within float tolerance. Its search records the source attention that
puts back the spans the vocabulary cannot say (a numpy array, used there and dropped). What
it does not do (the recurrent model, rotary positions, forced prefixes, constraints,
sampling, MBR, reranking, alignments and attention returned to the caller, a checkpoint
that is not plain float32, a ``torch.save`` archive such as ``last.pt``) is handed to PyTorch
(:class:`nmtkit.decode.lite_translator.LiteTranslator`).

This package imports numpy, safetensors, nmtkit's config and data layers and
:mod:`nmtkit.checkpoint_format`, and nothing of PyTorch.
"""

MAX_LINES = 16
"""The most lines (or sentences) a call translates in numpy by default; more go to PyTorch,
whose batched search overtakes numpy's one sentence at a time once the 2 s of its import and
load are paid. The README's main job's model, beam 5, Multi30k val, a 2-core Xeon, whole
``nmtkit translate`` commands: 8 lines 0.7 s in numpy against 2.5 s with PyTorch, 16 lines
1.6 s against 2.7 s, 32 lines 2.1 s against 2.0 s, 64 lines 3.6 s against 2.1 s (the same
translations)."""

"""Interoperability with other implementations.

:mod:`nmtkit.compat.annotated` converts the weights of The Annotated Transformer's
``make_model`` into an equivalent nmtkit :class:`~nmtkit.models.transformer.Transformer`.
"""

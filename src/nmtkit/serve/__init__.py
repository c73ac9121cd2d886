"""Serve a trained model over HTTP: a JSON API with micro-batching (``batcher``), and a web page
that shows the translation and its attention (``static/``). Needs the ``serve`` extra
(fastapi, uvicorn): ``from nmtkit.serve.app import create_app``; limits in ``limits``."""

# Developer shortcuts. `make figures` redraws the pictures of docs/guide.md.
#
#   make figures                                  # concepts: mask, PE, LR schedule, label smoothing,
#                                                 # architecture, temperature, teacher forcing
#   make figures RUN=runs/m30_small_1h            # + training curves of a run
#   make figures CKPT=runs/m30_small_1h/best.pt   # + attention maps (and the HTML page) of a model
#   make figures CKPT=... TEXT="Ein Hund rennt."  # ... for another sentence

NMTKIT ?= .venv/bin/nmtkit
FIGURES ?= docs/figures
RUN ?=
CKPT ?=
TEXT ?= Ein kleines Mädchen spielt am Strand.

.PHONY: figures test lint

figures:
	$(NMTKIT) plot all --out $(FIGURES) $(if $(RUN),--run $(RUN)) $(if $(CKPT),--model $(CKPT) --text "$(TEXT)" --html)

test:
	.venv/bin/python -m pytest -q

lint:
	.venv/bin/ruff check src tests

import pytest
import torch

from nmtkit.config import TrainConfig
from nmtkit.train.schedule import Schedule, build_optimizer, noam_rate


def test_noam_formula_and_peak_at_warmup():
    d, f, w = 512, 1.0, 4000
    assert noam_rate(100, d, f, w) == pytest.approx(d ** -0.5 * 100 * w ** -1.5)
    assert noam_rate(10000, d, f, w) == pytest.approx(d ** -0.5 * 10000 ** -0.5)
    rates = [noam_rate(s, d, f, w) for s in range(1, 3 * w)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == w
    assert noam_rate(0, d, f, w) == noam_rate(1, d, f, w)
    assert noam_rate(w, d, 2.0, w) == pytest.approx(2 * noam_rate(w, d, 1.0, w))


def test_adam_defaults_follow_the_paper_and_schedule_sets_rate():
    cfg = TrainConfig(warmup=10)
    p = torch.nn.Parameter(torch.zeros(2))
    opt = build_optimizer([p], cfg)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    s = Schedule(opt, cfg, d_model=16)
    lr = s.set_step(5)
    assert opt.param_groups[0]["lr"] == lr == pytest.approx(noam_rate(5, 16, 1.0, 10))


def test_plateau_halves_after_patience():
    cfg = TrainConfig(lr_schedule="plateau", lr=1e-3)
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg)
    s = Schedule(opt, cfg, d_model=16)
    s.validation(2.0)
    s.validation(2.5)
    assert s.set_step(1) == pytest.approx(1e-3)
    s.validation(2.5)
    assert s.set_step(1) == pytest.approx(5e-4)
    s2 = Schedule(opt, cfg, d_model=16)
    s2.load_state_dict(s.state_dict())
    assert s2.rate(1) == s.rate(1)

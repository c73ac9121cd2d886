import math

import pytest
import torch

from nmtkit.checkpoint import load_checkpoint
from nmtkit.config import OPTIMIZERS, Config, ConfigError, ModelConfig, TrainConfig, load
from nmtkit.models import build_model
from nmtkit.train.loop import Trainer
from nmtkit.train.schedule import (
    Schedule,
    build_optimizer,
    cosine_rate,
    decay_groups,
    inverse_sqrt_rate,
    noam_rate,
)
from nmtkit.train.start import Start

from .helpers import ROOT, run_until_ctrl_c, tiny_copy_overrides


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


# --- AdamW, inverse_sqrt, cosine (issue 16, item 6) ---------------------------------------------


def test_inverse_sqrt_warms_up_linearly_peaks_at_lr_then_decays_as_step_to_the_minus_half():
    lr, w = 1e-3, 100
    assert inverse_sqrt_rate(50, lr, w) == pytest.approx(5e-4)
    assert inverse_sqrt_rate(100, lr, w) == pytest.approx(1e-3)
    assert inverse_sqrt_rate(400, lr, w) == pytest.approx(5e-4)  # lr * sqrt(100 / 400)
    assert inverse_sqrt_rate(0, lr, w) == inverse_sqrt_rate(1, lr, w) == pytest.approx(1e-5)
    rates = [inverse_sqrt_rate(s, lr, w) for s in range(1, 1000)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == w
    # The shape of Eq. 3: Noam with factor chosen for the same peak gives the same rates.
    d = 64
    factor = lr / noam_rate(w, d, 1.0, w)
    for s in (1, 37, 100, 999):
        assert inverse_sqrt_rate(s, lr, w) == pytest.approx(noam_rate(s, d, factor, w))


def test_cosine_warms_up_then_reaches_min_lr_at_the_horizon_and_stays():
    lr, w, horizon, low = 1.0, 10, 110, 0.1
    assert cosine_rate(5, lr, w, horizon, low) == pytest.approx(0.5)
    assert cosine_rate(10, lr, w, horizon, low) == pytest.approx(1.0)  # the peak
    assert cosine_rate(60, lr, w, horizon, low) == pytest.approx(0.55)  # half-way: the mean
    assert cosine_rate(110, lr, w, horizon, low) == pytest.approx(0.1)
    assert cosine_rate(5000, lr, w, horizon, low) == pytest.approx(0.1)
    rates = [cosine_rate(s, lr, w, horizon, low) for s in range(w, horizon + 1)]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))  # never rises after warmup
    assert cosine_rate(1, 2.0, 0, 100, 0.0) == pytest.approx(1.0 + math.cos(math.pi / 100))  # no warmup
    # Through Schedule: cosine_steps = 0 means train.max_steps.
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], TrainConfig())
    cfg = TrainConfig(lr_schedule="cosine", lr=2e-3, min_lr=1e-4, warmup=5, max_steps=50)
    assert Schedule(opt, cfg, 16).set_step(50) == pytest.approx(1e-4)
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-4)
    cfg = TrainConfig(lr_schedule="cosine", lr=2e-3, min_lr=1e-4, warmup=5, max_steps=50, cosine_steps=20)
    assert Schedule(opt, cfg, 16).rate(20) == pytest.approx(1e-4)
    assert Schedule(opt, cfg, 16).rate(12) > 1e-4


def test_cosine_warns_when_the_run_may_end_before_its_horizon(caplog):
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], TrainConfig())
    with caplog.at_level("WARNING", logger="nmtkit.train.schedule"):
        Schedule(opt, TrainConfig(lr_schedule="cosine", lr=1e-3, max_minutes=5), 16)
    assert "train.cosine_steps" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="nmtkit.train.schedule"):
        Schedule(opt, TrainConfig(lr_schedule="cosine", lr=1e-3, max_minutes=5, cosine_steps=900), 16)
    assert caplog.text == ""


def _tiny_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))


def _train(optimizer, weight_decay, steps=5):
    net = _tiny_net()
    opt = build_optimizer(net.parameters(), TrainConfig(optimizer=optimizer, weight_decay=weight_decay,
                                                        lr=1e-2))
    for _ in range(steps):
        net(torch.arange(10)).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    return net.state_dict(), opt


def test_adamw_equals_adam_without_weight_decay_and_differs_with_it():
    assert OPTIMIZERS == ("adam", "adamw")
    adam, adam_opt = _train("adam", 0.0)
    adamw, adamw_opt = _train("adamw", 0.0)
    assert isinstance(adam_opt, torch.optim.Adam) and isinstance(adamw_opt, torch.optim.AdamW)
    assert all(torch.equal(adam[k], adamw[k]) for k in adam)  # bit-identical
    decayed, _ = _train("adamw", 0.1)
    coupled, _ = _train("adam", 0.1)
    assert not torch.equal(adam["1.weight"], decayed["1.weight"])
    assert not torch.equal(coupled["1.weight"], decayed["1.weight"])  # L2 in Adam is not AdamW


def test_adamw_decay_is_decoupled_and_spares_biases_and_norms():
    """With zero gradients Adam's step is 0, so only the decay moves the weights: AdamW
    shrinks each matrix by exactly (1 - lr * wd) and leaves 1-D parameters alone; Adam's L2
    instead becomes a gradient (wd * w) that Adam normalises into an lr-sized step."""
    lr, wd = 1e-2, 0.1
    for name, expect_bias_moved in (("adamw", False), ("adam", True)):
        net = _tiny_net()
        before = {k: v.clone() for k, v in net.state_dict().items()}
        opt = build_optimizer(net.parameters(), TrainConfig(optimizer=name, weight_decay=wd, lr=lr))
        for p in net.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        after = net.state_dict()
        if name == "adamw":
            for k in ("0.weight", "1.weight"):  # embedding table, linear matrix
                assert torch.allclose(after[k], before[k] * (1 - lr * wd), rtol=0, atol=1e-7), k
        assert (not torch.equal(after["1.bias"], before["1.bias"])) is expect_bias_moved
        assert (not torch.equal(after["2.weight"], before["2.weight"])) is expect_bias_moved


def test_decay_groups_of_a_transformer():
    model = build_model(ModelConfig(d_model=16, d_ff=32, heads=2, layers=1), 40, 40)
    groups = decay_groups(model.parameters(), 0.01)
    decay, keep = groups
    assert decay["weight_decay"] == 0.01 and keep["weight_decay"] == 0.0
    ids = {"decay": {id(p) for p in decay["params"]}, "keep": {id(p) for p in keep["params"]}}
    for name, p in model.named_parameters():
        group = "keep" if ("norm" in name or name.endswith("bias")) else "decay"
        assert id(p) in ids[group], name
    assert len(ids["decay"] | ids["keep"]) == len(list(model.parameters()))  # tied: counted once
    only_bias = decay_groups([torch.nn.Parameter(torch.zeros(3))], 0.1)  # an empty group is left out
    assert len(only_bias) == 1 and only_bias[0]["weight_decay"] == 0.0


@pytest.mark.parametrize("raw,msg", [
    ({"optimizer": "sgd"}, "train.optimizer must be adam|adamw"),
    ({"lr_schedule": "inverse_sqrt", "warmup": 0}, "train.warmup must be >= 1 for noam and inverse_sqrt"),
    ({"lr_schedule": "cosine", "lr": 1e-3, "min_lr": 1e-3}, "train.min_lr must be below train.lr"),
    ({"lr_schedule": "cosine", "lr": 1e-3, "warmup": 100, "cosine_steps": 100},
     "train.cosine_steps .* must exceed train.warmup"),
    ({"lr_schedule": "cosine", "lr": 1e-3, "warmup": 100, "max_steps": 50},
     "train.cosine_steps .* must exceed train.warmup"),
    ({"min_lr": -1.0}, "train.min_lr must be >= 0"),
    ({"cosine_steps": -1}, "train.cosine_steps must be >= 0"),
])
def test_bad_optimizer_and_schedule_settings_are_refused(raw, msg):
    with pytest.raises(ConfigError, match=msg):
        Config.from_dict({"train": raw})
    Config.from_dict({"train": {"lr_schedule": "cosine", "lr": 1e-3, "warmup": 0, "max_steps": 5}})


def test_every_schedule_survives_a_state_round_trip():
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(1))], TrainConfig())
    for schedule in ("noam", "constant", "plateau", "inverse_sqrt", "cosine"):
        cfg = TrainConfig(lr_schedule=schedule, lr=1e-3, warmup=10, max_steps=100, plateau_patience=0)
        s = Schedule(opt, cfg, d_model=16)
        for loss in (2.0, 2.5, 2.6):
            s.validation(loss)
        restored = Schedule(opt, cfg, d_model=16)
        restored.load_state_dict(s.state_dict())
        assert [restored.rate(k) for k in (1, 10, 55, 100, 200)] == [s.rate(k) for k in (1, 10, 55, 100, 200)]


def _copy_cfg(steps, extra=()):
    return load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(steps) + [
        "train.optimizer=adamw", "train.weight_decay=0.01", "train.lr_schedule=cosine",
        "train.lr=3e-3", "train.min_lr=1e-4", "train.warmup=5", "train.cosine_steps=24", *extra])


@pytest.mark.slow
def test_adamw_with_cosine_resumes_exactly(tmp_path, monkeypatch):
    straight = Trainer(_copy_cfg(24), tmp_path / "a")
    optimizer = straight.updater.optimizer
    assert isinstance(optimizer, torch.optim.AdamW) and len(optimizer.param_groups) == 2
    straight.run()
    rates = [row["lr"] for row in straight.progress.history]
    assert float(rates[-1]) == pytest.approx(1e-4)  # step 24 = the horizon: min_lr
    interrupted = Trainer(_copy_cfg(24), tmp_path / "b")
    run_until_ctrl_c(monkeypatch, interrupted, 15)
    resumed = Trainer(_copy_cfg(24), tmp_path / "b", Start.resume())
    assert resumed.progress.step == 14
    resumed.run()
    assert [row["lr"] for row in resumed.progress.history] == rates
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    # The optimizer state is AdamW's: resuming it as Adam is refused, clearly.
    with pytest.raises(ValueError, match="cannot resume: train.optimizer is adam"):
        Trainer(_copy_cfg(30, ["train.optimizer=adam"]), tmp_path / "b", Start.resume())
    assert load_checkpoint(tmp_path / "b" / "last.pt")["config"]["train"]["optimizer"] == "adamw"


@pytest.mark.slow
def test_a_run_checkpointed_before_these_keys_existed_still_resumes(tmp_path):
    """A checkpoint's config lacks keys added later (train.optimizer, data.subword_alpha...):
    they read as their defaults, so the data and model sections still match."""
    from nmtkit.checkpoint import save_checkpoint

    cfg = load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(10))
    Trainer(cfg, tmp_path).run()
    ckpt = load_checkpoint(tmp_path / "last.pt")
    for section, key in (("train", "optimizer"), ("train", "min_lr"), ("train", "cosine_steps"),
                         ("data", "subword_alpha"), ("data", "subword_nbest")):
        del ckpt["config"][section][key]
    for key in ("format", "version", "weights_sha256"):
        ckpt.pop(key, None)
    save_checkpoint(tmp_path / "last.pt", ckpt)
    more = load(ROOT / "configs" / "copy_task.yaml", tiny_copy_overrides(12))
    resumed = Trainer(more, tmp_path, Start.resume())
    assert resumed.progress.step == 10
    assert resumed.run()["step"] == 12

"""Question 'pretrain': the shipped pre-trained policy, how long it took and how well it does."""

from __future__ import annotations

from rip_bench.results.model import Records, Result, Section
from rip_bench.results.text import _pct

PRETRAIN = ('policies/sim_50hz/pretrain.json', 'policies/sim_50hz_wide/pretrain.json')


def _randomisation() -> str:
    from dataclasses import fields

    from rip_learner.randomization import RANDOMIZATIONS

    rows = ['| drawn per episode | standard | wide |', '|---|---|---|']
    std, wide = RANDOMIZATIONS['standard'], RANDOMIZATIONS['wide']
    for f in fields(std):
        a, b = getattr(std, f.name), getattr(wide, f.name)
        how = 'x' if f.name.endswith('_scale') else '+'
        rows.append(
            f'| `{f.name}` | {how} {a[0]:g}–{a[1]:g} | '
            + ('same' if a == b else f'{how} {b[0]:g}–{b[1]:g}')
            + ' |'
        )
    return '\n'.join(rows)


def _pretrain_setup(r: Records) -> str:
    o = r[PRETRAIN[0]]['options']
    return (
        f'The committed `policies/sim_50hz/`, seed {o["seed"]}, alone on the machine; SB3 SAC '
        "on the simulator (the emulator's dynamics, encoder quantisation and noise, sensing "
        "latency, the rig's observation, action, reward and period), learning rate "
        f'{o["learning_rate"]:g}, entropy coefficient `{o["ent_coef"]}`, with a curriculum '
        f'(upright starts for the first {o["balance_steps"]} steps, then their share falling '
        f'to {_pct(o["final_upright_share"])} over {o["ramp_steps"]} steps, the rest hanging at '
        'rest) and domain randomisation per episode around the QUBE-Servo 2 '
        '(`rip_learner.randomization.RANDOMIZATIONS`: x scales the nominal value, + adds to it; '
        'latency in control periods):\n\n'
        + _randomisation()
        + '\n\nIt stops once the deterministic evaluations from hanging balance at least '
        f'{o["target_balance_s"]:g} s of {o["eval_seconds"]:g} on nominal and randomised '
        f'physics (after at least {o["min_steps"]} steps), or at {o["steps"]} steps / '
        f'{o["time_limit_s"] / 60:g} minutes.'
    )


def _pretrain_conclusion(r: Records) -> str:
    std, wide = (r[n] for n in PRETRAIN)
    b = std['best']
    return (
        f'**{std["wall_s"]:.0f} s** of wall time, {std["steps"]} steps '
        f'({std["steps"] / std["wall_s"]:.0f} steps/s with '
        f'{std["options"]["gradient_steps"]} SAC update per step, '
        f'{std["options"]["hidden_sizes"]}, batch {std["options"]["batch_size"]}), stopped by '
        f'"{std["stopped_by"]}"; deterministic from hanging it swings up in '
        f'{b["nominal"]["swing_up_s_mean"]:.1f} s and balances '
        f'{b["nominal"]["longest_balance_s"]["mean"]:.1f} s of {std["options"]["eval_seconds"]:g} '
        f'on nominal physics, {b["randomised"]["longest_balance_s"]["mean"]:.1f} s on randomised '
        f'physics. The wide prior took {wide["steps"]} steps in {wide["wall_s"]:.0f} s.'
    )


PRETRAIN_RESULT = Result(
    heading='',
    question='How long does pre-training the shipped policy take, and how well does it do in '
    'simulation?',
    setup=_pretrain_setup,
    files=PRETRAIN,
    conclusion=_pretrain_conclusion,
    replicate=(
        'python -m rip_learner.pretrain rate:=50 out:=policies/sim_50hz',
        'python -m rip_learner.pretrain rate:=50 out:=policies/sim_50hz_wide randomization:=wide',
        '# --help lists the options',
    ),
)


SECTION = Section('pretrain', 'The shipped pre-trained policy', (PRETRAIN_RESULT,))

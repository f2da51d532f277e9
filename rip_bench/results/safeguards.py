"""Question 'safeguards': what each safeguard does.

The learner's safeguards each taken away (:data:`SAFEGUARDS_RESULT`), the smoothness term
against the starting policy (:data:`SIM_FT_RESULT`), and narrower sampling in the training
episodes (:data:`SAMPLING_RESULT`).
"""

from __future__ import annotations

from typing import Any

from rip_bench.results.adapt import _promoted
from rip_bench.results.finetune import WIDE, _candidates, _cells, _rig_runs
from rip_bench.results.goals import FLOOR_S
from rip_bench.results.model import Records, Result, Section, Table
from rip_bench.results.text import _bullets, _control, _list, _pct, _q, _span
from rip_bench.results.v5 import _v5_balance, _v5_tv

SAFEGUARD_WORDS = {
    'no_prior': 'the prior data',
    'no_critic_first': 'the critic-first updates',
    'no_smoothness': 'the smoothness term',
    'no_warmup': 'the warm-up',
}
SAFEGUARDS = tuple(
    f'safeguards_worn_{arm}.json'
    for arm in ('all', 'none', 'no_prior', 'no_critic_first', 'no_smoothness', 'no_warmup')
)


def _safeguards_setup(r: Records) -> str:
    one = r[SAFEGUARDS[0]]
    sims = [r[n]['deployment']['sim_only']['summary'] for n in SAFEGUARDS]
    return (
        f'The fine-tune as configured then ({one["finetune_episodes"]} x '
        f'{one["episode_seconds"]:g} s on the worn rig, K = {one["gradient_steps"]}, guard off '
        "so that the learner's last policy is deployed; "
        f'{one["eval_episodes"]} x {one["eval_seconds"]:g} s deterministic deployment), one '
        'configuration at a time, one seed each. Code of commit d63f8a9, before the smoothness '
        "term shared the actor's pass (the same loss with other random draws); not re-run "
        "since. The smoothness lines used CAPS's full term (there was no `smoothness_reference` "
        "yet), and the training episodes sampled at SAC's own spread (no `train_noise_scale` "
        'yet). The simulation-only policy deploys at '
        f'{_span([s["longest_balance_s"]["mean"] for s in sims], 1, " s")} and '
        f'{_span([s["action_tv_per_s"]["mean"] for s in sims], 0)} TV/s on this rig in these '
        'runs.'
    )


def _safeguards_conclusion(r: Records) -> str:
    docs = {r[n]['label']: r[n] for n in SAFEGUARDS}

    def bal(d: dict[str, Any]) -> float:
        return _v5_balance(d, 'async_finetuned')

    def tv(d: dict[str, Any]) -> float:
        return _v5_tv(d, 'async_finetuned')

    full = docs['all']
    without = {k: d for k, d in docs.items() if k.startswith('no_')}
    worse = [k for k, d in without.items() if bal(d) < bal(full)]
    lost = [
        k
        for k, d in without.items()
        if d['deployment']['async_finetuned']['summary']['swung_up'] == 0
    ]
    smooth_on = [tv(d) for k, d in docs.items() if k not in ('none', 'no_smoothness')]
    smooth_off = [tv(docs['none']), tv(docs['no_smoothness'])]
    rets = full['finetune']['async']['episode_returns']
    eps = full['deployment']['async_finetuned']['summary']['episodes']
    reached = [k for k, d in docs.items() if bal(d) >= FLOOR_S]
    every = 'Every safeguard' if len(worse) == len(without) else f'{len(worse)} of {len(without)}'
    return (
        f'{every} taken away left the deployed '
        f'policy worse on this rig than all of them together ({bal(full):.2f} s), and none at '
        f'all deployed at {bal(docs["none"]):.2f} s. The smoothness term is what keeps chatter '
        f'down: {_span(smooth_on, 1)} TV/s with it against {_span(smooth_off, 1)} without. '
        + (
            f'Without {" or ".join(SAFEGUARD_WORDS.get(k, k) for k in lost)} the policy lost the '
            'swing-up '
            f'altogether (0 of {eps}). '
            if lost
            else ''
        )
        + f"{'None' if not reached else ', '.join(reached)} reached the worn rig's "
        f'{FLOOR_S:g} s goal, and even "all" had training returns falling to '
        f"{_pct(min(rets[len(rets) // 2 :]) / rets[0])} of the first episode's mid-run before "
        'recovering: the guard (off here) is what keeps such a dip off the rig. One seed per '
        'line is not a ranking of the safeguards, only evidence that they are not neutral.'
    )


SAFEGUARDS_RESULT = Result(
    heading="The learner's safeguards, each taken away",
    question="Does each of the learner's fine-tuning safeguards (prior data, critic-first "
    'updates, the smoothness term, the warm-up) change what the fine-tune deploys?',
    setup=_safeguards_setup,
    tables=(Table('safeguards', SAFEGUARDS),),
    conclusion=_safeguards_conclusion,
    replicate=(
        'bash bench/run_safeguards.sh',
        '# ARMS and RIGS select',
    ),
)

SIM_FT = tuple(
    f'sim_finetune_{rig}_{prior}_{setting}.json'
    for rig in ('worn', 'heavy')
    for prior in ('sim_50hz', 'sim_50hz_wide')
    for setting in ('initial', 'caps')
)


def _sim_ft_setup(r: Records) -> str:
    one = r[SIM_FT[0]]
    return (
        "In simulation (`bench sim-finetune`: the learner's update and the regression guard of "
        f'`config/finetune.yaml` on the simulated rig, {len(one["runs"])} seeds x '
        f'{one["episodes"]} x {one["episode_seconds"]:g} s, then the best policy deployed '
        f"{one['eval_episodes']} x {one['eval_seconds']:g} s). `caps` is CAPS's full term "
        '(`smoothness_reference: none`), `initial` the shipped reference. Code of commit '
        '323b824, before the balance bar and `train_noise_scale`; at nice 19 beside another '
        "benchmark, which does not change a simulation's result."
    )


def _sim_ft_conclusion(r: Records) -> str:
    def promoted(name: str) -> str:
        evs = [e for run in r[name]['runs'] for e in run['evaluations']]
        return f'{_promoted(evs)} of {len(evs)}'

    def better(name: str) -> list[dict[str, Any]]:
        d = r[name]
        start = round(d['starting_policy']['balance_s'], 2)
        return [x for x in d['runs'] if round(x['deployed']['balance_s'], 2) > start]

    worn = [n for n in SIM_FT if '_worn_' in n]
    heavy = [n for n in SIM_FT if '_heavy_' in n]
    caps = {n for n in SIM_FT if n.endswith('_caps.json')}
    w_ref = [n for n in worn if n not in caps]
    w_caps = [n for n in worn if n in caps]
    gains = [
        f'{len(better(n))} of {len(r[n]["runs"])} on the '
        f'{"wide" if "_wide_" in n else "standard"} prior'
        + (
            f' ({_list([x["deployed"]["balance_s"] for x in better(n)])} s against '
            f'{r[n]["starting_policy"]["balance_s"]:.2f} s)'
            if better(n)
            else ''
        )
        for n in w_ref
    ]

    def everyone(name: str) -> bool:
        evs = [e for run in r[name]['runs'] for e in run['evaluations']]
        return _promoted(evs) == len(evs)

    full = [n for n in heavy if everyone(n)]
    fewer = [n for n in heavy if not everyone(n)]
    ref, full_term = (
        [e for c in _cells(r[n]['rigs']['rig_shifted_worn']) for e in _candidates(c)]
        for n in ('matrix_wide_9db4a66.json', 'matrix_wide_caps.json')
    )
    return _bullets(
        f"**With CAPS's full term the worn rig's candidates are rejected** "
        f'({" and ".join(promoted(n) for n in w_caps)} promoted). With the reference they stay '
        f'close to the starting policy, and {" and ".join(promoted(n) for n in w_ref)} drive. '
        f'Seeds whose best deployed above the start: {"; ".join(gains)}. So the reference '
        "stops the unlearning; it does not by itself make the worn rig's policy better.",
        '**On the heavy rig both settings keep the policy**: '
        + (
            f'{promoted(full[0])} promoted in each'
            if len({promoted(n) for n in full}) == 1
            else ', '.join(promoted(n) for n in full) + ' promoted'
        )
        + (
            ', except '
            + ', '.join(
                f'{"CAPS" if n in caps else "the reference"} from the '
                f'{"wide" if "_wide_" in n else "standard"} prior ({promoted(n)})'
                for n in fewer
            )
            if fewer
            else ''
        )
        + '.',
        "The same difference shows on the emulated rig: in the wide prior's matrices, the worn "
        f"rig's guard promoted {_promoted(ref)} of {len(ref)} candidates with the reference (at "
        f"9db4a66) against {_promoted(full_term)} of {len(full_term)} with CAPS's full term "
        '([results_history.md](results_history.md)).',
    )


SIM_FT_RESULT = Result(
    heading='The smoothness term against the starting policy',
    question="CAPS's temporal term penalises every jump |a(s) − a(s')|²; does counting only "
    "what exceeds the starting policy's own jump (`smoothness_reference: initial`) stop the "
    'unlearning that the full term caused?',
    setup=_sim_ft_setup,
    tables=(Table('sim-finetune', SIM_FT),),
    compare=('matrix_wide_9db4a66.json', 'matrix_wide_caps.json'),
    conclusion=_sim_ft_conclusion,
    replicate=('SETTINGS="initial caps" bash bench/run_sim_finetune.sh',),
)


def _sampling_conclusion(r: Records) -> str:
    early = r['matrix_wide_8b13c2b.json']['rigs']['rig_shifted_worn']
    cells = _cells(early)
    worst = min(cells, key=lambda c: min(c['episode_returns']))
    rets = worst['episode_returns']
    last = rets.index(min(rets))
    now = [c for v in _rig_runs(r, WIDE).values() for c in _cells(v)]
    share = min(c['goals']['worst_second_half_return_share'] for c in now)
    runs = len(now)
    return (
        f'`train_noise_scale` ({_control("train_noise_scale"):g}, shipped) samples a training '
        "episode's actions at that share of the policy's standard deviation. The guard judges "
        "a policy's mean action and cannot see what its samples do: at 8b13c2b, on the worn "
        f"rig, seed {worst['seed']}'s training episode {last + 1} returned {rets[last]:.0f} "
        f'against {rets[0]:.0f} for its first, driven by a policy the guard had promoted. With '
        f'the narrower sampling, no training episode of the {runs} finished wide-prior runs of '
        f"{_q('finetune')} fell below {_pct(share)} of its run's first. "
        '`test_training_actions_spread_by_the_noise_scale` reads each draw back from the '
        'transitions of the real loop on the emulator.'
    )


SAMPLING_RESULT = Result(
    heading='Narrower sampling in the training episodes',
    question="Does sampling the training episodes' actions narrower than the policy's own "
    'spread keep a training episode from collapsing where the guard cannot see?',
    setup=lambda r: (
        "The wide prior's matrices before the narrower sampling (at 8b13c2b, "
        '[results_history.md](results_history.md)) and with it (above).'
    ),
    compare=('matrix_wide_8b13c2b.json', *WIDE),
    conclusion=_sampling_conclusion,
)


SECTION = Section(
    'safeguards',
    'What does each safeguard do?',
    (SAFEGUARDS_RESULT, SIM_FT_RESULT, SAMPLING_RESULT),
)

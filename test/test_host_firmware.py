"""The C firmware of ``firmware/``: plant, command line, fuzz and microcontroller images.

Its plant against dynamics.py, its command line, the fuzz of its core under the sanitizers,
and the cross-compiled microcontroller images.

The serial behaviour of the host build is tested with the Python emulator's, in
``test_firmware_serial.py`` and ``test_rig_link.py``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
import random
import shutil
import subprocess
import sys

import pytest

from rip_control.procs import child_env
from rip_control.rig.dynamics import FurutaDynamics, PendulumParams
from rip_control.rig.emulator_args import build_arg_parser
from rip_control.rig.host_firmware import FIRMWARE_DIR, command_line

REPO = Path(__file__).resolve().parent.parent
RIGS = sorted((REPO / 'config').glob('rig_*.yaml'))
#: Every term of the model on: what an identification may write (besides the shipped rigs).
WIDENED = {
    'motor_dead_zone_v': 0.6,
    'motor_dead_zone_offset_v': -0.2,
    'actuator_lag_s': 0.004,
    'arm_coulomb_friction_nm': 0.002,
    'arm_static_friction_nm': 0.003,
    'arm_cable_stiffness_nm_per_rad': 0.0015,
    'pendulum_inertia_factor': 1.6,
}
CROSS_PACKAGES = 'gcc-avr avr-libc gcc-arm-none-eabi libnewlib-arm-none-eabi'

# The C plant evaluates the same expressions in the same order with the same libm, and
# without fused multiply-adds: it should agree with dynamics.py to rounding, not just roughly.
# The tolerance still leaves room for a libm that rounds sin/cos differently in the last bit.
ANGLE_TOLERANCE_RAD = 1e-9


def _trace_c(binary: Path, params: PendulumParams, start, blocks) -> list[list[float]]:
    args = build_arg_parser().parse_args([])  # the emulator's defaults; trace mode ignores them
    argv = command_line(args, params, binary) + ['--plant-trace', ','.join(map(repr, start))]
    stdin = ''.join(f'{v!r} {int(engaged)} {steps}\n' for v, engaged, steps in blocks)
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [[float(x) for x in line.split()] for line in out.stdout.splitlines()]


@pytest.mark.parametrize('rig', [*RIGS, 'widened'], ids=[*(p.stem for p in RIGS), 'widened'])
def test_the_c_plant_follows_dynamics_py_from_the_same_start_under_the_same_voltages(
    host_firmware_built, rig
):
    params = PendulumParams(**WIDENED) if rig == 'widened' else PendulumParams.from_yaml(rig)
    rng = random.Random(str(rig))
    # 6 s: a swing-up-like bang-bang phase into the cable stop, then random holds, with the
    # driver disengaged (coasting) now and then; voltages beyond the limit are clamped.
    blocks = [(rng.choice([-12.0, 12.0]), True, rng.randrange(20, 400)) for _ in range(10)]
    blocks += [
        (rng.uniform(-11.0, 11.0), rng.random() > 0.15, rng.randrange(1, 200)) for _ in range(90)
    ]
    start = (0.3, 0.05, 0.0, -0.4)
    c_states = _trace_c(host_firmware_built, params, start, blocks)
    py = FurutaDynamics(params)
    py.set_state(*start)
    h = params.physics_step_s
    worst = 0.0
    hit_stop = False
    for (v, engaged, steps), c in zip(blocks, c_states, strict=True):
        for _ in range(steps):
            py.step(h, v, engaged)
        hit_stop |= py.at_limit
        worst = max(worst, abs(py.theta - c[0]), abs(py.alpha - c[1]))
        assert abs(py.theta_dot - c[2]) <= 1e-6 and abs(py.alpha_dot - c[3]) <= 1e-6
        assert bool(c[4]) == py.at_limit
        assert (int(c[5]), int(c[6])) == py.encoder_counts()
    assert worst <= ANGLE_TOLERANCE_RAD, f'largest angle difference {worst:.3g} rad'
    assert hit_stop, 'the trajectory never reached the cable stop'
    assert math.isfinite(worst)


def test_a_bad_rig_file_is_refused_by_name_before_the_c_firmware_starts(tmp_path):
    bad = tmp_path / 'rig.yaml'
    bad.write_text('rig:\n  pendulum_mass_kg: -0.2\n')
    out = subprocess.run(
        [
            sys.executable,
            '-m',
            'rip_control.rig.emulator',
            '--firmware',
            'c',
            '--params',
            str(bad),
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=30,
    )
    assert out.returncode == 2
    assert 'pendulum_mass_kg must be > 0, got -0.2' in out.stderr


def test_a_missing_host_build_is_an_error_that_says_how_to_build_it(tmp_path):
    env = child_env({'RIP_FIRMWARE_HOST': str(tmp_path / 'nowhere')})
    out = subprocess.run(
        [sys.executable, '-m', 'rip_control.rig.emulator', '--firmware', 'c'],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert out.returncode == 2
    assert 'nowhere' in out.stderr and 'not an executable file' in out.stderr


@pytest.mark.parametrize(
    'fault',
    [
        ['--stuck-driver'],
        ['--reversed', 'motor'],
        ['--no-deadman'],
        ['--reset'],
        ['--faults-after-replies', '10'],
        ['--faults-for-replies', '5'],
        ['--clock-offset-s', '1'],
    ],
)
def test_a_fault_only_the_python_emulator_has_is_refused_for_the_c_firmware(fault):
    # Never silently ignored: a test asking the C firmware for it would test nothing.
    out = subprocess.run(
        [sys.executable, '-m', 'rip_control.rig.emulator', '--firmware', 'c', *fault],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=30,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert fault[0] in out.stderr and 'Python emulator only' in out.stderr, out.stderr


@pytest.mark.parametrize(
    ('args', 'message'),
    [
        (['--param', 'pendulum_mas_kg=0.1'], "unknown rig parameter 'pendulum_mas_kg'"),
        (
            ['--param', 'arm_mass_kg=heavy'],
            "arm_mass_kg must be a finite number >= 0, got 'heavy'",
        ),
        (['--deadman-ms', '5'], "--deadman-ms must be an integer in 10..2000, got '5'"),
        (['--param', 'sensing_latency_s=10'], 'sensing_latency_s 10 is too long'),
    ],
)
def test_the_c_program_refuses_bad_options_naming_them(host_firmware_built, args, message):
    out = subprocess.run(
        [str(host_firmware_built), *args], capture_output=True, text=True, timeout=10
    )
    assert out.returncode == 2 and message in out.stderr


# ---- the fuzz of the core -------------------------------------------------------------------


def _build_fuzz(core_dir: Path, out: Path) -> Path:
    cc = shutil.which(os.environ.get('CC', 'cc'))
    if cc is None:
        pytest.fail('no C compiler: the fuzz target needs one (gcc or clang)')
    subprocess.run(
        [
            cc,
            '-std=c99',
            '-O1',
            '-g',
            '-fsanitize=address,undefined',
            '-fno-sanitize-recover=all',
            f'-I{core_dir}',
            '-o',
            str(out),
            str(FIRMWARE_DIR / 'fuzz' / 'fuzz_core.c'),
            str(core_dir / 'rip_fw.c'),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


@pytest.fixture(scope='module')
def fuzz_binary():
    out = subprocess.run(
        ['make', '-C', str(FIRMWARE_DIR), 'fuzz'], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return FIRMWARE_DIR / 'build' / 'fuzz' / 'fuzz_core'


@pytest.mark.parametrize('seed', [1, 2])
def test_a_million_fuzz_inputs_run_clean_under_address_and_undefined_sanitizers(fuzz_binary, seed):
    out = subprocess.run(
        [str(fuzz_binary), '1000000', str(seed)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert '1000000 inputs clean' in out.stdout
    assert 'runtime error' not in out.stderr  # UBSan's words, in case recovery were on


# Each mutation breaks one safety rule of the core; the fuzz must notice every one.
MUTATIONS = {
    'late deadman': ('> g_deadman_ms)', '> g_deadman_ms + 3u)', 'did not trip on time'),
    'early deadman': ('> g_deadman_ms)', '>= g_deadman_ms)', 'tripped early'),
    'crc ignored': ('if (crc != get_u16', 'if (0 && crc != get_u16', 'enabled'),
    'voltage while disengaged': (
        'if (!g_engaged) {\n        g_voltage_mv = 0;',
        'if (0) {\n        g_voltage_mv = 0;',
        'voltage was set while the driver is disabled',
    ),
    'no clamp': ('if (mv > max) {', 'if (0) {', 'beyond the motor limit'),
    'stop input ignored by ENGAGE': (
        'if (rip_hal_motor_allowed()) {',
        'if (1) {',
        'enabled with the emergency stop pressed',
    ),
    'stop input not watched': (
        '} else if (!rip_hal_motor_allowed()) {',
        '} else if (0) {',
        'after the emergency stop was pressed',
    ),
    'voltage set outside the lock': (
        '    g_voltage_mv = (int16_t)mv;\n    rip_hal_motor_set_mv((int16_t)mv);\n'
        '    g_heartbeat_ms = g_ms; /* the heartbeat */\n    rip_hal_irq_unlock(irq);',
        '    rip_hal_irq_unlock(irq);\n    g_voltage_mv = (int16_t)mv;\n'
        '    rip_hal_motor_set_mv((int16_t)mv);\n    g_heartbeat_ms = g_ms;',
        'a voltage was set without the lock',
    ),
    'short payload accepted': (
        'if (length != request_length(cmd)) {',
        'if (length > request_length(cmd)) {',
        'a voltage no well-formed SET_VOLTAGE asked for',
    ),
    'buffer overrun': (
        'if (length > RIP_MAX_PAYLOAD) {\n            rx_bad_frame();',
        'if (length > 240u) {\n            rx_bad_frame();',
        'out of bounds',
    ),
}


@pytest.mark.parametrize('mutation', list(MUTATIONS))
def test_the_fuzz_catches_a_core_that_breaks_a_safety_rule(tmp_path, mutation):
    old, new, expected = MUTATIONS[mutation]
    core = tmp_path / 'core'
    shutil.copytree(FIRMWARE_DIR / 'core', core)
    source = (core / 'rip_fw.c').read_text()
    assert old in source, f'the mutation no longer applies: {old!r}'
    (core / 'rip_fw.c').write_text(source.replace(old, new, 1))
    binary = _build_fuzz(core, tmp_path / 'fuzz_mutant')
    out = subprocess.run([str(binary), '200000', '1'], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0, f'the fuzz missed "{mutation}": {out.stdout}'
    assert expected in out.stderr, out.stderr[-2000:]


# ---- the microcontroller images -------------------------------------------------------------


def _cross_compilers_or_skip() -> None:
    missing = [c for c in ('avr-gcc', 'arm-none-eabi-gcc') if shutil.which(c) is None]
    if missing:
        if os.environ.get('CI') == 'true':
            pytest.fail(f'CI must cross-compile the firmware, but {missing} are missing')
        pytest.skip(f'no {" or ".join(missing)}: install the Debian packages {CROSS_PACKAGES}')


@pytest.mark.readme('make firmware')
def test_make_firmware_builds_the_avr_and_cortex_m4_images_and_prints_their_sizes(tmp_path):
    _cross_compilers_or_skip()
    build = tmp_path / 'build'
    out = subprocess.run(
        ['make', '-C', str(REPO), 'firmware', f'FIRMWARE_BUILD={build}'],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for image in ('avr/rip_fw.hex', 'avr/rip_fw.elf', 'cm4/rip_fw.bin', 'cm4/rip_fw.elf'):
        assert (build / image).stat().st_size > 0, image
    text = out.stdout
    assert 'ATmega2560' in text and 'Cortex-M4' in text
    sizes = [line.split() for line in text.splitlines() if line.strip().endswith('.elf')]
    assert len(sizes) == 2, text
    avr_text, avr_data, avr_bss = (int(x) for x in sizes[0][:3])
    assert avr_text + avr_data < 256 * 1024 and avr_data + avr_bss < 8 * 1024
    arm_text, arm_data, arm_bss = (int(x) for x in sizes[1][:3])
    assert arm_text + arm_data < 512 * 1024 and arm_data + arm_bss < 128 * 1024
    # The Cortex-M image starts with its vector table: the initial stack pointer in RAM,
    # then the reset handler's address in flash with the Thumb bit set.
    import struct

    image = (build / 'cm4' / 'rip_fw.bin').read_bytes()
    stack, reset = struct.unpack_from('<II', image)
    assert 0x20000000 < stack <= 0x20020000
    assert reset & 1 and 0x08000000 <= reset - 1 < 0x08000000 + len(image)
    hex_text = (build / 'avr' / 'rip_fw.hex').read_text()
    assert hex_text.startswith(':') and hex_text.rstrip().endswith(':00000001FF')


@pytest.mark.parametrize('firmware', ['c'], indirect=True)
def test_the_emergency_stop_input_disengages_at_once_and_refuses_engage(start_emulator):
    # The host build plays the stop's sense input with signals (SIGUSR1 pressed, SIGUSR2
    # released); the core reads it as the boards do (rip_hal_motor_allowed).
    import signal
    import time

    from rip_control.rig.client import LowLevelClient, RigEngageRefused, RigProtocolError
    from rip_control.rig.protocol import ErrorCode

    emu = start_emulator('--events')
    with LowLevelClient(str(emu.link)) as client:
        client.engage()
        client.set_voltage(2.0)
        pressed = time.monotonic()
        emu.signal(signal.SIGUSR1)
        off = emu.wait_for_event('disengaged stop input', timeout_s=2.0)
        assert off is not None, emu.events()
        assert off - pressed < 0.05
        assert not client.get_state().engaged
        # Refused while pressed, by name (not a link fault counted as a serial error).
        with pytest.raises(RigEngageRefused, match='emergency stop pressed'):
            client.engage()
        with pytest.raises(RigProtocolError) as err:
            client.set_voltage(1.0)
        assert err.value.error == ErrorCode.NOT_ENGAGED
    # README, first power-on, step 2: rig_check must end saying so (the port is exclusive).
    check = subprocess.run(
        [
            sys.executable,
            '-m',
            'rip_control.rig_check',
            '--port',
            str(emu.link),
            '--seconds',
            '1',
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
    )
    assert check.returncode == 1, check.stderr
    assert 'RigEngageRefused' in check.stderr and 'emergency stop pressed' in check.stderr
    with LowLevelClient(str(emu.link)) as client:
        emu.signal(signal.SIGUSR2)  # released: engaging works again
        deadline = time.monotonic() + 2.0
        while True:
            try:
                client.engage()
                break
            except RigEngageRefused:
                assert time.monotonic() < deadline, 'still refused after the release'
        client.disengage_motor()

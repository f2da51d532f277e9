"""Replay buffer files: round trip, rate refusal, corruption refusal, atomic saves."""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rip_control import buffer_file
from rip_control.buffer_file import BufferMeta, BufferRejected
from rip_learner import buffer_store

OBS, ACT = 6, 1


def _arrays(n, seed=0):
    """Random transitions a rig of the task could make (values inside its spaces)."""
    rng = np.random.default_rng(seed)
    terminated = rng.uniform(size=n) < 0.1
    truncated = ~terminated & (rng.uniform(size=n) < 0.05)
    return {
        'observations': rng.uniform(-1, 1, (n, OBS)).astype(np.float32),
        'next_observations': rng.uniform(-1, 1, (n, OBS)).astype(np.float32),
        'actions': rng.uniform(-1, 1, (n, ACT)).astype(np.float32),
        'rewards': np.where(terminated, -10.0, rng.uniform(-0.25, 1, n)).astype(np.float32),
        'dones': (terminated | truncated).astype(np.float32),
        'timeouts': truncated.astype(np.float32),
    }


def _save(path, n=100, rate=50.0, seed=0, version=7):
    arrays = _arrays(n, seed)
    buffer_file.save(path, arrays, BufferMeta(rate, OBS, ACT, n, policy_version=version))
    return arrays


def _load(path, rate=50.0):
    return buffer_file.load(path, rate_hz=rate, obs_size=OBS, action_size=ACT)


def test_round_trip_keeps_every_field_and_the_tags(tmp_path):
    path = tmp_path / 'b.safetensors'
    arrays = _save(path)
    loaded, meta = _load(path)
    assert meta == BufferMeta(50.0, OBS, ACT, 100, 7)
    # The provenance of transitions of unknown origin, and a save's id, round trip too.
    buffer_file.save(path, arrays, BufferMeta(50.0, OBS, ACT, 100, 7, 'save-1'))
    assert _load(path)[1].generation == 'save-1'
    for name in buffer_file.FIELDS:
        np.testing.assert_array_equal(loaded[name], arrays[name])


def test_the_file_runs_no_code_when_loaded(tmp_path):
    path = tmp_path / 'b.safetensors'
    _save(path)
    data = path.read_bytes()
    assert b'pickle' not in data and not data.startswith(b'\x80')  # safetensors, not a pickle


def test_a_buffer_from_another_rate_is_refused_naming_both_rates(tmp_path):
    path = tmp_path / 'b.safetensors'
    _save(path, rate=100.0)
    with pytest.raises(BufferRejected, match=r'100 Hz.*50 Hz'):
        _load(path, rate=50.0)


@pytest.mark.parametrize('cut', [0, 5, 100, -10])
def test_a_truncated_buffer_is_refused(tmp_path, cut):
    path = tmp_path / 'b.safetensors'
    _save(path)
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut >= 0 else data[:cut])
    with pytest.raises(BufferRejected, match='b.safetensors'):
        _load(path)


def test_a_flipped_byte_in_the_data_is_refused(tmp_path):
    path = tmp_path / 'b.safetensors'
    _save(path)
    data = bytearray(path.read_bytes())
    data[-50] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(BufferRejected, match='checksum'):
        _load(path)


def test_missing_file_and_other_sizes_are_refused_clearly(tmp_path):
    with pytest.raises(BufferRejected, match='cannot read'):
        _load(tmp_path / 'nope.safetensors')
    path = tmp_path / 'b.safetensors'
    _save(path)
    with pytest.raises(BufferRejected, match='obs/action sizes 6/1'):
        buffer_file.load(path, rate_hz=50.0, obs_size=5, action_size=1)


def test_sb3_buffer_extract_and_insert_round_trip_in_order():
    from stable_baselines3.common.buffers import ReplayBuffer

    from rip_learner.sac import ACTION_SPACE, observation_space

    rb = ReplayBuffer(8, observation_space(0), ACTION_SPACE, handle_timeout_termination=True)
    arrays = _arrays(11)  # wraps around: the oldest 3 are overwritten
    buffer_store.insert(rb, arrays)
    out = buffer_store.extract(rb)
    np.testing.assert_array_equal(out['observations'], arrays['observations'][3:])
    np.testing.assert_array_equal(out['rewards'], arrays['rewards'][3:])
    # SB3 keeps timeouts apart from dones: truncation must not cut bootstrapping
    np.testing.assert_array_equal(out['timeouts'], arrays['timeouts'][3:])
    np.testing.assert_array_equal(out['dones'], arrays['dones'][3:])


def _save_forever(path, first_seed, n):
    # Each save tags the file with its seed (as the policy version): a loaded file says which
    # complete save it is.
    seed = first_seed
    while True:
        _save(path, n=n, seed=seed, version=seed)
        seed += 1


def test_a_kill_during_save_leaves_the_previous_buffer_intact_and_the_next_save_clears_its_temp(
    tmp_path,
):
    path = tmp_path / 'b.safetensors'
    n = 20000  # 1.2 MB: the temp file lives long enough to be seen and killed in
    _save(path, n=n, seed=0, version=0)
    ctx = multiprocessing.get_context('spawn')
    leftovers, attempts = [], 0
    while len(leftovers) < 3:
        attempts += 1
        assert attempts <= 20, f'only {len(leftovers)} of {attempts - 1} kills landed mid-save'
        proc = ctx.Process(target=_save_forever, args=(path, 1000 * attempts, n))
        proc.start()
        # This child's own temp file (its pid names it): it exists only while a save of this
        # child is in progress, between creating it and renaming it over the buffer.
        own_tmp = tmp_path / f'.{path.name}.{proc.pid}.tmp'
        deadline = time.monotonic() + 60
        while not own_tmp.exists():
            assert proc.is_alive(), f'the saving child died on its own ({proc.exitcode})'
            assert time.monotonic() < deadline, 'the child never started a save'
            os.sched_yield()
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        if own_tmp.exists():  # the kill landed mid-save (else the save had just finished)
            leftovers.append(own_tmp)
        arrays, meta = _load(path)  # never a torn file...
        assert meta.count == n
        # ...but exactly one complete save: the first one or one of a killed child's.
        expected = _arrays(n, seed=meta.policy_version)
        for name in buffer_file.FIELDS:
            np.testing.assert_array_equal(arrays[name], expected[name])
    # The next save is not confused by what the killed writers left: it completes, and it
    # removes their temp files (a learner killed now and then would otherwise fill the disk).
    _save(path, n=10, seed=99, version=99)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['b.safetensors']
    assert _load(path)[1].policy_version == 99


def test_a_save_leaves_the_temp_file_of_a_live_writer_alone(tmp_path):
    path = tmp_path / 'b.safetensors'
    writer = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    try:
        in_progress = tmp_path / f'.{path.name}.{writer.pid}.tmp'
        in_progress.write_bytes(b'a save in progress')
        _save(path)
        assert in_progress.read_bytes() == b'a save in progress'
    finally:
        writer.kill()
        writer.wait()
    _save(path)  # its writer is dead now: a leftover
    assert not in_progress.exists()


def _resaved(path, metadata=None, arrays=None):
    """The file written again with its metadata or arrays changed and its checksum kept."""
    from safetensors.numpy import load, save

    from rip_control.policy import read_metadata

    data = path.read_bytes()
    md = read_metadata(data) | (metadata or {})
    tensors = load(data) | (arrays or {})
    path.write_bytes(save(tensors, metadata=md))


@pytest.mark.parametrize('metadata', [{'policy_version': '9'}, {'generation': 'another'}])
def test_a_changed_metadata_string_is_a_checksum_mismatch(tmp_path, metadata):
    path = tmp_path / 'b.safetensors'
    _save(path)
    _resaved(path, metadata=metadata)
    with pytest.raises(BufferRejected, match='checksum mismatch'):
        _load(path)


def test_a_version_2_file_whose_checksum_covers_only_its_arrays_still_loads(tmp_path):
    from safetensors.numpy import save

    path = tmp_path / 'b.safetensors'
    arrays = {**_arrays(10), **buffer_file.unknown_provenance(10)}
    md = {
        'format': buffer_file.FORMAT,
        'format_version': '2',
        'rate_hz': '50.0',
        'obs_size': str(OBS),
        'action_size': str(ACT),
        'count': '10',
        'policy_version': '3',
        'sha256': buffer_file._digest(arrays),
    }
    path.write_bytes(save(arrays, metadata=md))
    loaded, meta = _load(path)
    assert meta.count == 10 and meta.policy_version == 3
    np.testing.assert_array_equal(loaded['rewards'], arrays['rewards'])


def _with(arrays, name, row, value):
    out = {k: v.copy() for k, v in arrays.items()}
    out[name][row] = value
    return out


@pytest.mark.parametrize(
    ('change', 'message'),
    [
        (lambda a: _with(a, 'actions', 3, 1.5), r'actions\[3\] = \[1.5\] is outside'),
        (
            lambda a: _with(a, 'observations', 5, 7.0),
            r'observations\[5\] = .* holds a sine, cosine or action outside',
        ),
        (lambda a: _with(a, 'dones', 2, 0.3), 'dones holds values other than 0 and 1'),
        (
            lambda a: _with(
                _with(_with(a, 'dones', 6, 0.0), 'timeouts', 6, 0.0), 'rewards', 6, 1e30
            ),
            r'rewards\[6\] = 1e\+30 of a step not terminated is outside',
        ),
    ],
)
def test_values_no_rig_of_the_task_could_store_are_refused_by_name(tmp_path, change, message):
    path = tmp_path / 'b.safetensors'
    arrays = change(_arrays(20))
    buffer_file.save(path, arrays, BufferMeta(50.0, OBS, ACT, 20))
    with pytest.raises(BufferRejected, match=message):
        _load(path)

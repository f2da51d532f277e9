"""The emulator's claim of its link: one emulator a link, the claim's file gone with it.

Pure file locking, no emulator: the claim of a served link by a running emulator is
test_rig_link's (both firmwares).
"""

import os

import pytest

from rip_control.rig.emulator import LinkInUse, claim_link, release_link


@pytest.mark.parametrize('then', ['removed', 'replaced'])
def test_a_link_claim_is_released_with_its_file_and_one_on_a_removed_file_claims_afresh(
    tmp_path, monkeypatch, then
):
    link = tmp_path / 'rig'
    lock = tmp_path / '.rig.lock'
    held = claim_link(link)
    with pytest.raises(LinkInUse, match='is served by a running emulator'):
        claim_link(link)
    release_link(link, held)
    assert not lock.exists()
    # A claim that opened the file just before its holder removed it: it locks a file no
    # longer at the path, and must claim the one there instead (else two would hold "it"),
    # whether none is there yet or another claim has made one already.
    stale = os.open(lock, os.O_RDONLY | os.O_CREAT)
    os.unlink(lock)
    if then == 'replaced':
        lock.touch()
    opened = os.open
    calls = []

    def open_the_removed_one_first(path, flags, mode=0o777):
        calls.append(path)
        return stale if len(calls) == 1 else opened(path, flags, mode)

    with monkeypatch.context() as m:
        m.setattr(os, 'open', open_the_removed_one_first)
        fd = claim_link(link)
    assert len(calls) == 2 and os.fstat(fd).st_ino == os.stat(lock).st_ino
    with pytest.raises(LinkInUse):
        claim_link(link)  # the file at the path is the one held
    release_link(link, fd)

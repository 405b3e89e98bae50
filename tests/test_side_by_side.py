"""The batches of one embedding call run side by side, one thread each."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from recalld.embedding.local import LocalEmbedder
from recalld.embedding.side_by_side import Runner, physical_cores
from recalld.errors import ProviderError


def test_every_batch_runs_once_longest_first_on_one_thread() -> None:
    seen: list[list[int]] = []
    Runner(1).run([[0], [1, 2], [3, 4, 5]], seen.append)
    assert seen == [[3, 4, 5], [1, 2], [0]]


def test_batches_overlap_on_two_threads() -> None:
    runner = Runner(2)
    inside = 0
    most = 0
    lock = threading.Lock()
    threads: set[int] = set()

    def job(batch: list[int]) -> None:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
            threads.add(threading.get_ident())
        time.sleep(0.05)
        with lock:
            inside -= 1
            done.extend(batch)

    done: list[int] = []
    runner.run([[i] for i in range(6)], job)
    assert sorted(done) == list(range(6))
    assert most == 2 and len(threads) == 2
    assert threading.get_ident() in threads  # the caller works too, it does not only wait
    runner.close()


def test_first_error_stops_the_rest_and_is_raised() -> None:
    runner = Runner(2)
    ran: list[int] = []

    def job(batch: list[int]) -> None:
        ran.append(batch[0])
        if batch[0] == 9:
            raise ProviderError("model failed")
        time.sleep(0.02)

    with pytest.raises(ProviderError, match="model failed"):
        runner.run([[i] for i in range(10)], job)  # 9 runs first: the longest
    assert len(ran) <= 2  # what was already running finishes; nothing new starts
    runner.close()


def test_width_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Runner(0)
    assert physical_cores() >= 1


@pytest.mark.slow
def test_vectors_do_not_depend_on_the_threads() -> None:
    """The same texts on one thread and on three: bit-identical rows in input order (a batch's
    rows are written by the thread that ran it)."""
    texts = [("word " * (1 + (i * 37) % 180)) + f"item {i}" for i in range(120)]
    one = LocalEmbedder(threads=1, batch_size=4)
    three = LocalEmbedder(threads=3, batch_size=4)
    a = one.embed(texts)
    b = three.embed(texts)
    assert a.shape == (120, 384)
    np.testing.assert_array_equal(a, b)
    # and each row is what that text gives alone
    for i in (0, 57, 119):
        np.testing.assert_array_equal(one.embed([texts[i]])[0], a[i])
